// The machine a run measured, for results.json and docs/benchmarks.md.
import { readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import type { Machine } from './results.js';

const version = (pkg: string): string => {
  try {
    // Read from node_modules: some packages' exports do not include their package.json.
    const url = new URL(`../../node_modules/${pkg}/package.json`, import.meta.url);
    return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
};

function osName(): string {
  try {
    return /PRETTY_NAME="([^"]+)"/.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? process.platform;
  } catch {
    return process.platform;
  }
}

export function machineInfo(): Machine {
  return {
    cpu: cpus()[0]?.model.trim() ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    os: osName(),
    node: process.versions.node,
    onnxruntimeNode: version('onnxruntime-node'),
    onnxruntimeWeb: version('onnxruntime-web'),
    transformersJs: version('@huggingface/transformers'),
    date: `${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
  };
}

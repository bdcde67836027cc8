// `npm run generate --backend auto` (the default) never picks a runner that refuses the weights, and never
// prints Dawn's warnings for a run that does not use WebGPU: real child processes, their stderr read.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterKind, probeGpuAdapter } from '../scripts/lib/gpu-probe.js';
import { autoBackend } from '../scripts/lib/runtimes.js';
import { modelDir } from './helpers/engines.js';
import { writeGgufFolder } from './helpers/gguf-folder.js';

let root: string;
beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'cli-backend-'));
  await writeGgufFolder(join(root, 'gguf'));
  // A quantised ONNX folder holding only its q4 graph, as an import of one dtype writes it.
  mkdirSync(join(root, 'q4', 'onnx'), { recursive: true });
  for (const f of [
    'config.json',
    'generation_config.json',
    'tokenizer.json',
    'tokenizer_config.json',
    'onnx/model_q4.onnx',
  ])
    copyFileSync(join(modelDir('tiny'), f), join(root, 'q4', f));
}, 120_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

function generate(dir: string): { status: number | null; stderr: string } {
  const run = spawnSync('npx', ['tsx', 'scripts/generate.ts', '--model', dir, '--prompt', 'Hi', '--max-tokens', '4'], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: run.status, stderr: run.stderr };
}

/** The runtime name the summary line ends with: `... tok/s (wasm)`. */
const ranOn = (stderr: string) => /tok\/s \((\w+)\)/.exec(stderr)?.[1];

describe('--backend auto', () => {
  it('tells a hardware adapter from a software rasteriser', () => {
    expect(adapterKind(null)).toBe('none');
    expect(adapterKind({ isFallbackAdapter: true })).toBe('software');
    expect(adapterKind({ architecture: 'software', device: 'llvmpipe-llvm-15-0-6-256-bits-' })).toBe('software');
    expect(adapterKind({ architecture: '', device: 'SwiftShader Device (Subzero)' })).toBe('software');
    expect(adapterKind({ isFallbackAdapter: false, architecture: 'ampere', device: 'NVIDIA H200' })).toBe('hardware');
  });

  it('sends quantised and GGUF weights to the kernels without asking Dawn; float ones to WebGPU only on a GPU', () => {
    let asked = 0;
    const adapter = (kind: 'hardware' | 'software' | 'none') => () => {
      asked++;
      return kind;
    };
    for (const dtype of ['gguf', 'q4', 'int8', 'q4f16', 'uint8'])
      expect(autoBackend(dtype, adapter('hardware')), dtype).toBe('wasm');
    expect(asked).toBe(0);
    expect(autoBackend('fp32', adapter('hardware'))).toBe('webgpu');
    expect(autoBackend('fp16', adapter('software'))).toBe('cpu');
    expect(autoBackend(undefined, adapter('none'))).toBe('cpu');
  });

  it('runs a GGUF folder and a q4-only folder on the kernels, with no Dawn warning', () => {
    for (const name of ['gguf', 'q4']) {
      const { status, stderr } = generate(join(root, name));
      expect(status, stderr).toBe(0);
      expect(ranOn(stderr), stderr).toBe('wasm');
      expect(stderr).not.toMatch(/Warning:|artificially reduced/);
    }
  }, 240_000);

  it('runs float weights on onnxruntime-node unless a hardware GPU is there, with no Dawn warning off WebGPU', () => {
    const { status, stderr } = generate(modelDir('tiny'));
    expect(status, stderr).toBe(0);
    const expected = probeGpuAdapter().kind === 'hardware' ? 'webgpu' : 'cpu';
    expect(ranOn(stderr), stderr).toBe(expected);
    if (expected === 'cpu') expect(stderr).not.toMatch(/Warning:|artificially reduced/);
  }, 120_000);
});

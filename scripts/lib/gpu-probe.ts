// What kind of WebGPU adapter Dawn finds, asked in a child process: Dawn prints its limit warnings
// ("maxDynamicUniformBuffersPerPipelineLayout artificially reduced ...") to stderr from native code when an
// adapter is requested on lavapipe, and a process cannot silence its own native stderr. So `--backend auto`
// asks a short-lived child, whose stderr is dropped, and loads Dawn itself only when it runs on WebGPU.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

/** `hardware` (a GPU), `software` (a CPU rasteriser such as lavapipe or SwiftShader), or `none`. */
export type AdapterKind = 'hardware' | 'software' | 'none';

export interface AdapterInfo {
  kind: AdapterKind;
  /** vendor, architecture and device as Dawn reports them; empty without an adapter. */
  description: string;
}

/** Software by Dawn's own flag, the architecture it reports, or the rasterisers' names (docs/platform.md, WebGPU). */
export function adapterKind(
  info: { isFallbackAdapter?: boolean; architecture?: string; device?: string } | null,
): AdapterKind {
  if (!info) return 'none';
  if (info.isFallbackAdapter) return 'software';
  if (/software|cpu/i.test(info.architecture ?? '') || /llvmpipe|lavapipe|swiftshader/i.test(info.device ?? ''))
    return 'software';
  return 'hardware';
}

const CHILD = `
const { create, globals } = await import(process.argv[1]);
Object.assign(globalThis, globals);
const adapter = await create([]).requestAdapter({ powerPreference: 'high-performance' });
const info = adapter?.info;
process.stdout.write(JSON.stringify(info ? { isFallbackAdapter: info.isFallbackAdapter ?? adapter.isFallbackAdapter,
  vendor: info.vendor, architecture: info.architecture, device: info.device } : null));
process.exit(0);`;

let probed: AdapterInfo | undefined;

/** The adapter Dawn would give this process (asked once per process); `none` without the `webgpu` package. */
export function probeGpuAdapter(): AdapterInfo {
  if (probed) return probed;
  let dawn: string;
  try {
    dawn = pathToFileURL(createRequire(import.meta.url).resolve('webgpu')).href;
  } catch {
    probed = { kind: 'none', description: '' };
    return probed;
  }
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', CHILD, dawn], {
    encoding: 'utf8',
    env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp' },
    stdio: ['ignore', 'pipe', 'ignore'],
    timeout: 30_000,
  });
  let info: { isFallbackAdapter?: boolean; vendor?: string; architecture?: string; device?: string } | null = null;
  try {
    info = run.status === 0 ? JSON.parse(run.stdout) : null;
  } catch {
    info = null;
  }
  const description = info ? [info.vendor, info.architecture, info.device].filter((s) => s).join(' ') : '';
  probed = { kind: adapterKind(info), description };
  return probed;
}

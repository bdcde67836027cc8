// Choosing the backend: the CLI's --backend (scripts/lib/runtimes.ts) and the service's BACKEND var
// (src/env.ts). Runs with or without a WebGPU adapter: `auto` must follow what the host has.
import { describe, expect, it } from 'vitest';
import { backendVar, resolveBackend, type Env } from '../../src/env.js';
import { probeGpuAdapter } from '../../scripts/lib/gpu-probe.js';
import { isNodeBackend, nodeRuntime } from '../../scripts/lib/runtimes.js';
import { gpu } from './gpu.js';

describe('backend choice', () => {
  it('BACKEND: auto, wasm or webgpu; anything else falls back to auto', () => {
    const env = (BACKEND?: string) => ({ BACKEND }) as Env;
    expect(backendVar(env())).toBe('auto');
    expect(backendVar(env(' WebGPU '))).toBe('webgpu');
    expect(backendVar(env('wasm'))).toBe('wasm');
    expect(backendVar(env('cuda'))).toBe('auto');
  });

  it('auto is webgpu only where the host has WebGPU and can run it; forced choices stand', () => {
    expect(resolveBackend('auto', false)).toBe('wasm');
    expect(resolveBackend('auto', true)).toBe('wasm'); // workerd: WebGPU EP not wired in
    expect(resolveBackend('auto', true, true)).toBe('webgpu');
    expect(resolveBackend('wasm', true, true)).toBe('wasm');
    expect(resolveBackend('webgpu', false)).toBe('webgpu'); // and the object then refuses to load, naming why
  });

  it('the CLI accepts auto, cpu, wasm, webgpu; auto on float weights is webgpu exactly on a hardware adapter', async () => {
    expect(['auto', 'cpu', 'wasm', 'webgpu'].every(isNodeBackend)).toBe(true);
    expect(isNodeBackend('gpu')).toBe(false);
    // The child's answer agrees with the adapter this process finds (lavapipe here: software).
    expect(probeGpuAdapter().kind === 'none').toBe(gpu === null);
    expect((await nodeRuntime('auto')).name).toBe(probeGpuAdapter().kind === 'hardware' ? 'webgpu' : 'cpu');
    expect((await nodeRuntime('auto', 'q4')).name).toBe('wasm');
  });
});

// What test/workers/kernel-builds.test.ts compares across the kernels' builds, in workerd and against Node (whose
// values test/workers/global-setup.ts computes with this same function): the quantised product in every form, and
// attention over an 8-bit pool.
import type { KernelExports } from '../../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../../src/engine/runners/wasm/linear-memory.js';
import { attentionProbe } from './attention-kernels.js';
import { quantProbe } from './quant-layout.js';

export function kernelProbe(kernels: KernelExports, memory: LinearMemory): Record<string, number[]> {
  return { ...quantProbe({ k: kernels, mem: memory }), ...attentionProbe(kernels, memory) };
}

// What test/workers/kernel-builds.test.ts compares across the kernels' builds, in workerd and against Node (whose
// values test/workers/global-setup.ts computes with this same function): the quantised product in every form, and
// attention over an 8-bit pool.
import { type DotLowering, eightBitExact } from '../../src/engine/runners/wasm/dot-lowering.js';
import type { KernelExports } from '../../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../../src/engine/runners/wasm/linear-memory.js';
import { attentionProbe } from './attention-kernels.js';
import { PROBE_ROWS, quantProbe } from './quant-layout.js';

export function kernelProbe(kernels: KernelExports, memory: LinearMemory): Record<string, number[]> {
  return { ...quantProbe({ k: kernels, mem: memory }), ...attentionProbe(kernels, memory) };
}

/**
 * Whether `build`'s product of `rows` rows in `format` is exact under `lowering`, so held to the others' bits
 * (eightBitExact); one row alone takes the split path, exact under any lowering.
 */
export const exactUnder = (build: string, format: string, lowering: DotLowering, rows: number): boolean =>
  !format.startsWith('v8') || rows === 1 || eightBitExact(build, lowering);

/** The rows of quantProbe's product under `key`. */
export const probeRows = (key: string): number => (key.endsWith(', one row') ? 1 : PROBE_ROWS);

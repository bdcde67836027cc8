// One quantised product laid out in the kernels' memory, ready to call: what products.ts times in Node and
// products-workerd-worker.ts in workerd. Random planes: the speed does not depend on the values.
import type { KernelExports } from '../../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../../src/engine/runners/wasm/linear-memory.js';

/** kernels/quant.h's forms; `actBytes`: an activation's bytes in the build that runs the form. */
export const FORMS = {
  q4: { kind: 0, bytesPerBlock: 16, build: 'relaxed', actBytes: 1 },
  int8: { kind: 7, bytesPerBlock: 32, build: 'baseline', actBytes: 2 },
  'int8 relaxed': { kind: 7, bytesPerBlock: 32, build: 'relaxed', actBytes: 1 },
} as const;
export type Form = keyof typeof FORMS;

export interface Built {
  kernels: KernelExports;
  memory: LinearMemory;
}

/** A random matrix of `form` in memory: its qmat header, and its bytes. */
function matrix(b: Built, form: Form, k: number, n: number): { header: number; bytes: number } {
  const f = FORMS[form];
  const blocks = k / 32;
  const groups = Math.ceil(n / 4);
  const q = b.memory.alloc(n * blocks * f.bytesPerBlock);
  const s = b.memory.alloc(groups * blocks * 4 * 4);
  const z = b.memory.alloc(groups * blocks * 4);
  const u8 = b.memory.u8(q, n * blocks * f.bytesPerBlock);
  for (let i = 0; i < u8.length; i++) u8[i] = (i * 2654435761) >>> 24;
  b.memory.f32(s, groups * blocks * 4).fill(0.01);
  b.memory.u8(z, groups * blocks * 4).fill(form === 'q4' ? 8 : 0);
  const header = b.memory.alloc(36);
  b.memory.i32(header, 9).set([f.kind, 0, q, 0, s, 0, z, 0, 0]);
  return { header, bytes: n * blocks * f.bytesPerBlock + groups * blocks * 4 * 5 };
}

/** How many copies of a (k, n) matrix of `form` total at least `coldMiB` (at least one): `productCall`'s `copies`. */
export function coldCopies(form: Form, k: number, n: number, coldMiB: number): number {
  return Math.max(1, Math.ceil((coldMiB * 2 ** 20) / ((k * n * FORMS[form].bytesPerBlock) / 32)));
}

/**
 * `rows` activations quantised as the build takes them, a (k, n) matrix of `form`, and the call that multiplies
 * them; `weightBytes`: what one call reads of the matrix. `actBytes`: 1 on a relaxed build, 2 on the baseline.
 */
export function productCall(
  b: Built,
  form: Form,
  k: number,
  n: number,
  rows: number,
  actBytes = FORMS[form].actBytes,
  copies = 1,
): { call: () => void; weightBytes: number } {
  const blocks = k / 32;
  const matrices = Array.from({ length: copies }, () => matrix(b, form, k, n));
  const bytes = matrices[0]!.bytes;
  const x = b.memory.alloc(rows * k * 4);
  const xq = b.memory.alloc(rows * k * actBytes);
  const xs = b.memory.alloc(rows * blocks * 4);
  const xsum = b.memory.alloc(rows * blocks * 8);
  const y = b.memory.alloc(rows * n * 4);
  const xv = b.memory.f32(x, rows * k);
  for (let i = 0; i < xv.length; i++) xv[i] = Math.sin(i);
  b.kernels.quantize_rows(xq, xs, xsum, x, rows, k, blocks);
  let next = 0;
  const call = () => {
    const { header } = matrices[next]!;
    next = next + 1 === copies ? 0 : next + 1;
    b.kernels.matmul_q(y, xq, xs, xsum, header, rows, blocks, n);
  };
  return { call, weightBytes: bytes };
}

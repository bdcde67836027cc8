// What the kernel tests share: random inputs, copies into linear memory, an error measure, the 8-bit row as the
// pool stores it, and attention() called over a pool the test wrote.
import type { KernelExports } from '../../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../../src/engine/runners/wasm/linear-memory.js';
import { mulberry32 } from './prng.js';

/** Roughly normal values (a sum of four uniforms), mean 0 and standard deviation `std`. */
export const gaussian = (seed: number, n: number, std = 1): Float32Array => {
  const next = mulberry32(seed);
  return Float32Array.from({ length: n }, () => (next() + next() + next() + next() - 2) * std * Math.sqrt(3));
};

/** Copies typed data into fresh linear memory and returns its pointer. */
export function putIn(mem: LinearMemory, data: Float32Array | Uint8Array | Uint16Array | Int32Array): number {
  const ptr = mem.alloc(data.byteLength + 16);
  new Uint8Array(mem.memory.buffer, ptr, data.byteLength).set(
    new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  );
  return ptr;
}

/** The largest |got - want|, over the largest |want|. */
export function maxRelErr(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let err = 0;
  let norm = 0;
  for (let i = 0; i < want.length; i++) {
    err = Math.max(err, Math.abs(got[i] - want[i]));
    norm = Math.max(norm, Math.abs(want[i]));
  }
  return err / norm;
}

/** Halves to even, as float32 division then nearest does. */
export const roundEven = (r: number): number =>
  Math.abs(r - Math.trunc(r)) === 0.5 ? 2 * Math.round(r / 2) : Math.round(r);

/** One (token, head) row as the 8-bit pool stores it, written plainly: float32 steps, halves to even. */
export function int8Row(x: ArrayLike<number>): { q: number[]; scale: number } {
  let amax = 0;
  for (let i = 0; i < x.length; i++) amax = Math.max(amax, Math.abs(x[i]));
  const scale = Math.fround(amax / 127);
  return { q: Array.from(x, (v) => (scale > 0 ? roundEven(Math.fround(v / scale)) : 0)), scale };
}

/** A pool a test wrote, and how attention() is to read it. */
export interface AttentionPool {
  kpool: number;
  vpool: number;
  table: number;
  heads: number;
  kvHeads: number;
  hd: number;
  bs: number;
  /** The pool's elements: 0 float32, 1 float16, 2 int8. */
  kvType: number;
  window: number;
}

/** attention() over `pool` for n queries at positions start.. (at qPtr), with fresh output and scores. */
export function attendIn(k: KernelExports, mem: LinearMemory, pool: AttentionPool) {
  const { kpool, vpool, table, heads, kvHeads, hd, bs, kvType, window } = pool;
  const width = heads * hd;
  return (start: number, n: number, qPtr: number): Float32Array => {
    const out = mem.alloc(n * width * 4);
    const scores = mem.alloc(n * heads * (start + n + 4) * 4);
    k.attention(
      out,
      qPtr,
      kpool,
      vpool,
      table,
      start,
      n,
      heads,
      kvHeads,
      hd,
      bs,
      1 / Math.sqrt(hd),
      scores,
      kvType,
      window,
    );
    return mem.f32(out, n * width).slice();
  };
}

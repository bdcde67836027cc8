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

/** attention()'s kv_type for an 8-bit pool. */
const KV_I8 = 2;

/** One case of attention over an 8-bit pool: its shape, `past` tokens cached and `count` new ones. */
export interface Int8AttentionCase {
  heads: number;
  kvHeads: number;
  hd: number;
  bs: number;
  past: number;
  count: number;
  window: number;
}

/**
 * The case's keys, values and queries (seeded), written to a fresh 8-bit pool in two kv_write_i8 calls (a cached
 * prefix, then the new tokens) with positions scattered over its blocks in reverse; then attention() over the new
 * tokens in one call (`out`), each token alone (a decode step), and in two uneven pieces.
 */
export function int8AttentionRun(k: KernelExports, mem: LinearMemory, c: Int8AttentionCase) {
  const { heads, kvHeads, hd, bs, past, count, window } = c;
  const put = (data: Float32Array | Int32Array): number => putIn(mem, data);
  const total = past + count;
  const numBlocks = Math.ceil(total / bs) + 1;
  const poolBytes = numBlocks * kvHeads * bs * (hd + 4);
  const [kpool, vpool] = [mem.alloc(poolBytes), mem.alloc(poolBytes)];
  const table = put(Int32Array.from({ length: numBlocks - 1 }, (_, i) => numBlocks - 1 - i));
  const kf = gaussian(30 + hd, total * kvHeads * hd);
  const vf = gaussian(31 + hd, total * kvHeads * hd);
  k.kv_write_i8(kpool, vpool, table, 0, past, put(kf), put(vf), kvHeads, hd, bs);
  const tail = past * kvHeads * hd;
  k.kv_write_i8(kpool, vpool, table, past, count, put(kf.subarray(tail)), put(vf.subarray(tail)), kvHeads, hd, bs);
  const q = gaussian(32, count * heads * hd).map((x) => x * 3);
  const qAt = put(q);
  const width = heads * hd;
  const attend = attendIn(k, mem, { kpool, vpool, table, heads, kvHeads, hd, bs, kvType: KV_I8, window });
  const out = attend(past, count, qAt);
  const alone = Array.from({ length: count }, (_, t) => attend(past + t, 1, qAt + t * width * 4));
  const cut = Math.ceil(count / 3);
  const pieces = Float32Array.from([
    ...attend(past, cut, qAt),
    ...attend(past + cut, count - cut, qAt + cut * width * 4),
  ]);
  return { kf, vf, q, out, alone, pieces };
}

/**
 * What kernel-builds.test.ts compares across builds and engines: a decode step alone (whose queries score keys
 * where they lie in the relaxed builds) and a block of tokens (widened chunks), over an 8-bit pool.
 */
export function attentionProbe(k: KernelExports, mem: LinearMemory): Record<string, number[]> {
  const run = int8AttentionRun(k, mem, { heads: 9, kvHeads: 3, hd: 24, bs: 16, past: 140, count: 12, window: 0 });
  return { 'attention int8, 12 tokens': Array.from(run.out), 'attention int8, one token': Array.from(run.alone[5]!) };
}

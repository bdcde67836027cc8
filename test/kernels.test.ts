// Each edge kernel (kernels/*.c) against a plain float64 computation of the same formula, and each one's
// batch invariance: a row's output bits do not depend on how many rows run with it or where it sits.
import { beforeAll, describe, expect, it } from 'vitest';
import { edgeKernelsModule } from '../src/backends/edge-kernels-node.js';
import { instantiateKernels, type KernelExports } from '../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../src/engine/runners/wasm/linear-memory.js';
import { fromHalf, toHalf } from '../src/engine/model/half.js';
import { attendIn, gaussian, maxRelErr as relErr, putIn } from './helpers/attention-kernels.js';

let k: KernelExports;
let mem: LinearMemory;

beforeAll(async () => {
  ({ kernels: k, memory: mem } = await instantiateKernels(edgeKernelsModule()));
});

const put = (data: Float32Array | Uint8Array | Uint16Array | Int32Array): number => putIn(mem, data);
const floats = (ptr: number, n: number): Float32Array => mem.f32(ptr, n).slice();

/** y (m, n) = x (m, k) @ W where w(kk, nn) gives the weight, in float64. */
function matmulRef(
  x: Float32Array,
  m: number,
  kk: number,
  n: number,
  w: (k: number, n: number) => number,
): Float64Array {
  const y = new Float64Array(m * n);
  for (let r = 0; r < m; r++)
    for (let c = 0; c < n; c++) {
      let s = 0;
      for (let i = 0; i < kk; i++) s += x[r * kk + i] * w(i, c);
      y[r * n + c] = s;
    }
  return y;
}

/** Runs a (y, x, m) kernel on all `m` rows and on each row alone: the rows must agree bit for bit. */
function checkInvariant(
  run: (y: number, x: number, m: number) => void,
  x: Float32Array,
  m: number,
  kk: number,
  n: number,
): Float32Array {
  const xPtr = put(x);
  const y = mem.alloc(m * n * 4 + 16);
  run(y, xPtr, m);
  const all = floats(y, m * n);
  for (const r of [0, m - 1, Math.floor(m / 2)]) {
    const one = mem.alloc(n * 4 + 16);
    run(one, xPtr + r * kk * 4, 1);
    expect(
      Buffer.from(floats(one, n).buffer).equals(Buffer.from(all.slice(r * n, (r + 1) * n).buffer)),
      `row ${r} alone`,
    ).toBe(true);
  }
  return all;
}

describe('float matrix kernels', () => {
  // Odd sizes reach every tile and tail: rows not a multiple of 4, columns not a multiple of 16 or 4.
  for (const [m, kk, n] of [
    [1, 64, 48],
    [7, 36, 27],
    [9, 576, 19],
    [5, 20, 130],
  ]) {
    it(`kn float32 ${m}x${kk} @ ${kk}x${n} matches float64 and is row-invariant`, () => {
      const x = gaussian(1, m * kk);
      const w = gaussian(2, kk * n, 0.1);
      const y = checkInvariant((yp, xp, rows) => k.matmul_kn_f32(yp, xp, put(w), rows, kk, n), x, m, kk, n);
      expect(
        relErr(
          y,
          matmulRef(x, m, kk, n, (i, c) => w[i * n + c]),
        ),
      ).toBeLessThan(1e-5);
    });

    it(`nk float32 ${m}x${kk} @ (${n}x${kk})^T matches float64 and is row-invariant`, () => {
      const x = gaussian(3, m * kk);
      const w = gaussian(4, n * kk, 0.1);
      const y = checkInvariant((yp, xp, rows) => k.matmul_nk_f32(yp, xp, put(w), rows, kk, n), x, m, kk, n);
      expect(
        relErr(
          y,
          matmulRef(x, m, kk, n, (i, c) => w[c * kk + i]),
        ),
      ).toBeLessThan(1e-5);
    });

    it(`kn and nk float16 ${m}x${kk}x${n} match float64 on the half weights`, () => {
      const x = gaussian(5, m * kk);
      const w = toHalf(gaussian(6, kk * n, 0.1));
      const wf = fromHalf(w);
      const kn = checkInvariant((yp, xp, rows) => k.matmul_kn_f16(yp, xp, put(w), rows, kk, n), x, m, kk, n);
      expect(
        relErr(
          kn,
          matmulRef(x, m, kk, n, (i, c) => wf[i * n + c]),
        ),
      ).toBeLessThan(1e-5);
      const nk = checkInvariant((yp, xp, rows) => k.matmul_nk_f16(yp, xp, put(w), rows, kk, n), x, m, kk, n);
      expect(
        relErr(
          nk,
          matmulRef(x, m, kk, n, (i, c) => wf[c * kk + i]),
        ),
      ).toBeLessThan(1e-5);
    });
  }

  it('bfloat16 widening (matmul_nk_bf16, embed_bf16) is exact', () => {
    const [m, kk, n] = [3, 21, 5];
    const x = gaussian(14, m * kk);
    const wf = gaussian(15, n * kk, 0.1);
    const bits = Uint16Array.from(new Uint32Array(wf.buffer), (u) => u >>> 16); // truncation: any bf16 will do
    const wide = Float32Array.from(bits, (b) => new Float32Array(Uint32Array.of(b << 16).buffer)[0]);
    const y = checkInvariant((yp, xp, rows) => k.matmul_nk_bf16(yp, xp, put(bits), rows, kk, n), x, m, kk, n);
    expect(
      relErr(
        y,
        matmulRef(x, m, kk, n, (i, c) => wide[c * kk + i]),
      ),
    ).toBeLessThan(1e-5);
    const out = mem.alloc(kk * 4);
    k.embed_bf16(out, put(bits), 2, kk);
    expect(Array.from(floats(out, kk))).toEqual(Array.from(wide.subarray(2 * kk, 3 * kk)));
  });

  it('float16 widening is exact for normal, subnormal, zero and negative halves', () => {
    const bits = Uint16Array.from([
      0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff, 0x1234, 0x8001, 0xc000, 0x5555, 0x0200, 0x3555,
      0x7000, 0x0bad,
    ]);
    const table = put(bits);
    const out = mem.alloc(64);
    k.embed_f16(out, table, 0, 16);
    expect(Array.from(floats(out, 16))).toEqual(Array.from(fromHalf(bits)));
  });
});

describe('row kernels', () => {
  it('rmsnorm, rope and silu_mul match float64', () => {
    const n = 24;
    const x = gaussian(11, 3 * n);
    const w = gaussian(12, n);
    const out = mem.alloc(3 * n * 4);
    k.rmsnorm(out, put(x), put(w), 3, n, 1e-5);
    const want = Array.from({ length: 3 * n }, (_, i) => {
      const r = Math.floor(i / n);
      const ms = x.slice(r * n, r * n + n).reduce((a, v) => a + v * v, 0) / n;
      return (x[i] / Math.sqrt(ms + 1e-5)) * w[i % n];
    });
    expect(relErr(floats(out, 3 * n), want)).toBeLessThan(1e-6);

    const hd = 8;
    const q = gaussian(13, 2 * 3 * hd); // 2 rows, 3 heads
    const angles = [0.3, 1.7, -2.2, 5.1, 0.01, 2.9, 12.5, -0.7];
    const cos = Float32Array.from(angles, Math.cos);
    const sin = Float32Array.from(angles, Math.sin);
    const qp = put(q);
    k.rope(qp, put(cos), put(sin), 2, 3, hd, 3 * hd);
    const roped = floats(qp, q.length);
    for (let r = 0; r < 2; r++)
      for (let h = 0; h < 3; h++)
        for (let j = 0; j < hd / 2; j++) {
          const base = r * 3 * hd + h * hd;
          const [c, s] = [cos[r * 4 + j], sin[r * 4 + j]];
          expect(roped[base + j]).toBeCloseTo(q[base + j] * c - q[base + j + 4] * s, 6);
          expect(roped[base + j + 4]).toBeCloseTo(q[base + j + 4] * c + q[base + j] * s, 6);
        }

    const g = Float32Array.from({ length: 16 }, (_, i) => (i - 8) * 1.5);
    const u = gaussian(14, 16);
    const gp = put(g);
    k.silu_mul(gp, put(u), 16);
    expect(
      relErr(
        floats(gp, 16),
        Array.from(g, (v, i) => (v / (1 + Math.exp(-v))) * u[i]),
      ),
    ).toBeLessThan(2e-7);
  });

  it("gelu_tanh_mul is PyTorch's tanh GELU times up; scale_inplace scales", () => {
    // Both tails (exp's clamps), zero, and the region where the cubic term matters.
    const g = Float32Array.from({ length: 40 }, (_, i) => (i - 20) * 0.45 + (i === 39 ? 1e6 : i === 0 ? -1e6 : 0));
    const u = gaussian(15, 40);
    const gp = put(g);
    k.gelu_tanh_mul(gp, put(u), 40);
    const gelu = (x: number): number => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
    const got = floats(gp, 40);
    const want = Array.from(g, (v, i) => gelu(v) * u[i]);
    expect(got[0] === 0).toBe(true); // gelu(-1e6) is 0: exp of the clamped argument is infinite there
    expect(relErr(got, want)).toBeLessThan(1e-6);
    const x = gaussian(16, 12);
    const xp = put(x);
    k.scale_inplace(xp, Math.fround(Math.sqrt(640)), 12);
    expect(Array.from(floats(xp, 12))).toEqual(Array.from(x, (v) => Math.fround(v * Math.fround(Math.sqrt(640)))));
  });
});

describe('paged attention', () => {
  /**
   * Float64 attention of `count` queries at positions start.. over keys/values listed by position; with a
   * window, the query at position p sees keys p - window + 1 .. p only.
   */
  function attentionRef(
    shape: { heads: number; kvHeads: number; hd: number },
    q: Float32Array,
    keys: number[][][],
    values: number[][][],
    start: number,
    count: number,
    window = 0,
  ): Float64Array {
    const { heads, kvHeads, hd } = shape;
    const out = new Float64Array(count * heads * hd);
    for (let t = 0; t < count; t++)
      for (let h = 0; h < heads; h++) {
        const kvh = Math.floor(h / (heads / kvHeads));
        const len = start + t + 1;
        const lo = window > 0 ? Math.max(0, len - window) : 0;
        const scores = Array.from({ length: len }, (_, j) =>
          j < lo
            ? -Infinity
            : keys[j][kvh].reduce((a, kv, d) => a + kv * q[(t * heads + h) * hd + d], 0) / Math.sqrt(hd),
        );
        const max = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - max));
        const sum = e.reduce((a, b) => a + b, 0);
        for (let d = 0; d < hd; d++)
          out[(t * heads + h) * hd + d] = e.reduce((a, p, j) => a + p * values[j][kvh][d], 0) / sum;
      }
    return out;
  }

  // Small blocks; blocks past the kernel's 16-key chunks, head_dim 24 (not a multiple of 16), queries that
  // see part of a chunk; a block size that is no multiple of 16. Sliding windows (Gemma 3's local layers):
  // shorter than the past, not a multiple of 4, and longer than some queries' whole past.
  const cases = [
    { heads: 4, kvHeads: 2, hd: 8, bs: 4, past: 5, count: 4, table: [4, 1, 5], window: 0 },
    { heads: 6, kvHeads: 2, hd: 24, bs: 32, past: 37, count: 11, table: [2, 0, 1], window: 0 },
    { heads: 3, kvHeads: 3, hd: 64, bs: 24, past: 19, count: 30, table: [3, 1, 0, 2], window: 0 },
    { heads: 6, kvHeads: 2, hd: 24, bs: 32, past: 37, count: 11, table: [2, 0, 1], window: 13 },
    { heads: 3, kvHeads: 3, hd: 64, bs: 24, past: 19, count: 30, table: [3, 1, 0, 2], window: 24 },
  ];
  for (const { heads, kvHeads, hd, bs, past, count, table: blocks, window } of cases)
    for (const half of [false, true]) {
      const what = `heads ${heads}/${kvHeads}, head_dim ${hd}, block ${bs}, ${past} cached + ${count}${window ? `, window ${window}` : ''}`;
      it(`writes new keys and values into their blocks and attends in place (${what}${half ? ', float16 pool' : ''}); each token's bits are its own`, () => {
        const bytes = half ? 2 : 4;
        const numBlocks = 6;
        const stride = numBlocks * kvHeads * bs * hd;
        const kpool = mem.alloc(stride * bytes);
        const vpool = mem.alloc(stride * bytes);
        const table = put(Int32Array.from(blocks)); // positions scattered over the pool's blocks
        const k1 = gaussian(20, (past + count) * kvHeads * hd);
        const v1 = gaussian(21, (past + count) * kvHeads * hd);
        const write = half ? k.kv_write_f16 : k.kv_write;
        write(kpool, vpool, table, 0, past, put(k1), put(v1), kvHeads, hd, bs);
        write(
          kpool,
          vpool,
          table,
          past,
          count,
          put(k1.subarray(past * kvHeads * hd)),
          put(v1.subarray(past * kvHeads * hd)),
          kvHeads,
          hd,
          bs,
        );
        const round = (a: Float32Array): Float32Array => (half ? fromHalf(toHalf(a)) : a);
        const [kr, vr] = [round(k1), round(v1)];
        const byPos = (a: Float32Array) =>
          Array.from({ length: past + count }, (_, j) =>
            Array.from({ length: kvHeads }, (_, h) =>
              Array.from(a.subarray((j * kvHeads + h) * hd, (j * kvHeads + h + 1) * hd)),
            ),
          );
        // The pool layout itself: position `at` is in block table[at / bs], at offset at % bs.
        const at = past + 1;
        const block = blocks[Math.floor(at / bs)];
        const poolK = half
          ? fromHalf(new Uint16Array(mem.memory.buffer, kpool, stride).slice())
          : floats(kpool, stride);
        const from = ((block * kvHeads + 1) * bs + (at % bs)) * hd;
        expect(Array.from(poolK.subarray(from, from + hd))).toEqual(byPos(kr)[at][1].map(Math.fround));
        const q = gaussian(22, count * heads * hd);
        const qAt = put(q);
        const row = heads * hd;
        const attend = attendIn(k, mem, { kpool, vpool, table, heads, kvHeads, hd, bs, kvType: half ? 1 : 0, window });
        const out = attend(past, count, qAt);
        expect(
          relErr(out, attentionRef({ heads, kvHeads, hd }, q, byPos(kr), byPos(vr), past, count, window)),
        ).toBeLessThan(1e-5);
        // Token t alone (its keys are in the pool already) gives the bits it got beside the others.
        for (let t = 0; t < count; t++)
          expect(attend(past + t, 1, qAt + t * row * 4)).toEqual(out.subarray(t * row, (t + 1) * row));
      });
    }
});

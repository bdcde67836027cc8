// Attention over an 8-bit pool (kernels/attention_i8.c) against a plain float64 reading of what its comment
// says it computes: queries rounded to 8 bits as cache rows are, exact integer scores, value weights rounded
// to 16 bits per chunk of absolute positions. And each token's bits are its own: alone, in a batch, in pieces, and
// in every build of the kernels.
import { beforeAll, describe, expect, it } from 'vitest';
import { edgeKernelsModule, KERNELS_BUILDS, type KernelsBuild } from '../src/backends/edge-kernels-node.js';
import { instantiateKernels, type KernelExports } from '../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../src/engine/runners/wasm/linear-memory.js';
import { int8AttentionRun, int8Row, maxRelErr, roundEven } from './helpers/attention-kernels.js';

const builds = new Map<KernelsBuild, { k: KernelExports; mem: LinearMemory }>();
beforeAll(async () => {
  for (const build of KERNELS_BUILDS) {
    const { kernels, memory } = await instantiateKernels(edgeKernelsModule(build));
    builds.set(build, { k: kernels, mem: memory });
  }
});

interface Shape {
  heads: number;
  kvHeads: number;
  hd: number;
}

/** Positions whose value weights share a scale: 128 up to head_dim 128, else 64. */
const valueChunk = (hd: number): number => (hd <= 128 ? 128 : 64);

/**
 * Float64 attention as the integer path defines it, from the rows the pool holds (rows[j][kvHead]) and the
 * queries: q rounded per (token, head), score = (q . k) * q scale * k scale / sqrt(hd), softmax, and each
 * weight p * v scale rounded to 16 bits against the largest in its chunk of valueChunk(hd) positions.
 */
function int8AttentionRef(
  { heads, kvHeads, hd }: Shape,
  q: Float32Array,
  keys: { q: number[]; scale: number }[][],
  values: { q: number[]; scale: number }[][],
  start: number,
  count: number,
  window: number,
): Float64Array {
  const out = new Float64Array(count * heads * hd);
  for (let t = 0; t < count; t++)
    for (let h = 0; h < heads; h++) {
      const g = Math.floor(h / (heads / kvHeads));
      const pos = start + t;
      const lo = window > 0 ? Math.max(0, pos + 1 - window) : 0;
      const qr = int8Row(q.subarray((t * heads + h) * hd, (t * heads + h + 1) * hd));
      const scores: number[] = [];
      for (let j = lo; j <= pos; j++)
        scores[j] =
          (keys[j][g].q.reduce((a, kv, d) => a + kv * qr.q[d], 0) * keys[j][g].scale * qr.scale) / Math.sqrt(hd);
      const max = Math.max(...scores.slice(lo));
      const p = scores.map((s) => Math.exp(s - max));
      const sum = p.slice(lo).reduce((a, b) => a + b, 0);
      const v = valueChunk(hd);
      for (let c = Math.floor(lo / v) * v; c <= pos; c += v) {
        const js = Array.from({ length: v }, (_, i) => c + i).filter((j) => j >= lo && j <= pos);
        const w = js.map((j) => p[j] * values[j][g].scale);
        const top = Math.max(...w);
        js.forEach((j, i) => {
          const weight = (roundEven((w[i] * 32767) / top) * top) / 32767;
          for (let d = 0; d < hd; d++) out[(t * heads + h) * hd + d] += (weight * values[j][g].q[d]) / sum;
        });
      }
    }
  return out;
}

describe('attention over an 8-bit pool, in integers', () => {
  // head_dim 8, 24 (the 16-dim tiles' remainder), 64 and 256 (chunks of 64 positions, not 128); blocks of 4,
  // 16, 24 and 32 (no multiple of 16, and chunks that span blocks); 30 tokens of 3 heads (two blocks of the
  // kernel's 64 queries); sliding windows shorter than the past, across a chunk edge, not a multiple of 4. A token
  // alone is a block of at most 8 queries, which the relaxed builds score from the pool's rows as they lie: groups
  // of 2, 3, 4, 5 (a tile of 4 and one) and 8 (two tiles of 4).
  const cases = [
    { heads: 4, kvHeads: 2, hd: 8, bs: 4, past: 70, count: 4, window: 0 },
    { heads: 6, kvHeads: 2, hd: 24, bs: 32, past: 137, count: 11, window: 0 },
    { heads: 3, kvHeads: 1, hd: 64, bs: 24, past: 19, count: 30, window: 0 },
    { heads: 9, kvHeads: 3, hd: 64, bs: 16, past: 300, count: 20, window: 0 },
    { heads: 6, kvHeads: 2, hd: 24, bs: 32, past: 137, count: 11, window: 13 },
    { heads: 3, kvHeads: 1, hd: 64, bs: 24, past: 190, count: 30, window: 71 },
    { heads: 4, kvHeads: 1, hd: 256, bs: 16, past: 150, count: 7, window: 0 },
    { heads: 5, kvHeads: 1, hd: 40, bs: 16, past: 45, count: 3, window: 0 },
    { heads: 16, kvHeads: 2, hd: 8, bs: 8, past: 33, count: 5, window: 21 },
  ];
  for (const c of cases) {
    const { heads, kvHeads, hd, past, count, window } = c;
    const what = `heads ${heads}/${kvHeads}, head_dim ${hd}, block ${c.bs}, ${past} cached + ${count}${window ? `, window ${window}` : ''}`;
    it(`computes what it says, and each token's bits are its own, in every build (${what})`, () => {
      const runs = [...builds].map(([build, { k, mem }]) => ({ build, ...int8AttentionRun(k, mem, c) }));
      const { kf, vf, q, out } = runs[0]!;
      const total = past + count;
      const rows = (a: Float32Array) =>
        Array.from({ length: total }, (_, j) =>
          Array.from({ length: kvHeads }, (_, h) =>
            int8Row(a.subarray((j * kvHeads + h) * hd, (j * kvHeads + h + 1) * hd)),
          ),
        );
      const want = int8AttentionRef({ heads, kvHeads, hd }, q, rows(kf), rows(vf), past, count, window);
      // float32 steps and a polynomial 2^x (2e-7) against float64; a weight near a rounding tie may round the other
      // way (one step of 16 bits is 3e-5 of its chunk's largest).
      expect(maxRelErr(out, want)).toBeLessThan(5e-5);
      const width = heads * hd;
      for (const run of runs) {
        // Token t alone, and the tokens in two uneven pieces: the same bits as in one call, and as the first build's.
        expect(run.out, run.build).toEqual(out);
        for (let t = 0; t < count; t++)
          expect(run.alone[t], `${run.build}: token ${t} alone`).toEqual(out.subarray(t * width, (t + 1) * width));
        expect(run.pieces, `${run.build}: in pieces`).toEqual(out);
      }
    });
  }
});

// Attention over an 8-bit pool (kernels/attention_i8.c) against a plain float64 reading of what its comment
// says it computes: queries rounded to 8 bits as cache rows are, exact integer scores, value weights rounded
// to 16 bits per chunk of absolute positions. And each token's bits are its own: alone, in a batch, in pieces.
import { beforeAll, describe, expect, it } from 'vitest';
import { edgeKernelsModule } from '../src/backends/edge-kernels-node.js';
import { instantiateKernels, type KernelExports } from '../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../src/engine/runners/wasm/linear-memory.js';
import { attendIn, gaussian, int8Row, maxRelErr, putIn, roundEven } from './helpers/attention-kernels.js';

let k: KernelExports;
let mem: LinearMemory;

beforeAll(async () => {
  ({ kernels: k, memory: mem } = await instantiateKernels(edgeKernelsModule()));
});

const KV_I8 = 2;
const put = (data: Float32Array | Int32Array): number => putIn(mem, data);

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
  // kernel's 64 queries); sliding windows shorter than the past, across a chunk edge, not a multiple of 4.
  const cases = [
    { heads: 4, kvHeads: 2, hd: 8, bs: 4, past: 70, count: 4, window: 0 },
    { heads: 6, kvHeads: 2, hd: 24, bs: 32, past: 137, count: 11, window: 0 },
    { heads: 3, kvHeads: 1, hd: 64, bs: 24, past: 19, count: 30, window: 0 },
    { heads: 9, kvHeads: 3, hd: 64, bs: 16, past: 300, count: 20, window: 0 },
    { heads: 6, kvHeads: 2, hd: 24, bs: 32, past: 137, count: 11, window: 13 },
    { heads: 3, kvHeads: 1, hd: 64, bs: 24, past: 190, count: 30, window: 71 },
    { heads: 4, kvHeads: 1, hd: 256, bs: 16, past: 150, count: 7, window: 0 },
  ];
  for (const { heads, kvHeads, hd, bs, past, count, window } of cases) {
    const what = `heads ${heads}/${kvHeads}, head_dim ${hd}, block ${bs}, ${past} cached + ${count}${window ? `, window ${window}` : ''}`;
    it(`computes what it says, and each token's bits are its own (${what})`, () => {
      const total = past + count;
      const numBlocks = Math.ceil(total / bs) + 1;
      const row = hd + 4;
      const poolBytes = numBlocks * kvHeads * bs * row;
      const [kpool, vpool] = [mem.alloc(poolBytes), mem.alloc(poolBytes)];
      // Positions scattered over the pool's blocks, in reverse.
      const blocks = Array.from({ length: numBlocks - 1 }, (_, i) => numBlocks - 1 - i);
      const table = put(Int32Array.from(blocks));
      const kf = gaussian(30 + hd, total * kvHeads * hd);
      const vf = gaussian(31 + hd, total * kvHeads * hd);
      k.kv_write_i8(kpool, vpool, table, 0, past, put(kf), put(vf), kvHeads, hd, bs);
      const tail = past * kvHeads * hd;
      k.kv_write_i8(kpool, vpool, table, past, count, put(kf.subarray(tail)), put(vf.subarray(tail)), kvHeads, hd, bs);
      const rows = (a: Float32Array) =>
        Array.from({ length: total }, (_, j) =>
          Array.from({ length: kvHeads }, (_, h) =>
            int8Row(a.subarray((j * kvHeads + h) * hd, (j * kvHeads + h + 1) * hd)),
          ),
        );
      const q = gaussian(32, count * heads * hd).map((x) => x * 3);
      const qAt = put(q);
      const width = heads * hd;
      const attend = attendIn(k, mem, { kpool, vpool, table, heads, kvHeads, hd, bs, kvType: KV_I8, window });
      const out = attend(past, count, qAt);
      const want = int8AttentionRef({ heads, kvHeads, hd }, q, rows(kf), rows(vf), past, count, window);
      // float32 steps and a polynomial 2^x (2e-7) against float64; a weight near a rounding tie may round the other
      // way (one step of 16 bits is 3e-5 of its chunk's largest).
      expect(maxRelErr(out, want)).toBeLessThan(5e-5);
      // Token t alone, and the tokens in two uneven pieces: the same bits as in one call.
      for (let t = 0; t < count; t++)
        expect(attend(past + t, 1, qAt + t * width * 4), `token ${t} alone`).toEqual(
          out.subarray(t * width, (t + 1) * width),
        );
      const cut = Math.ceil(count / 3);
      const pieces = [...attend(past, cut, qAt), ...attend(past + cut, count - cut, qAt + cut * width * 4)];
      expect(Float32Array.from(pieces)).toEqual(out);
    });
  }
});

import { describe, expect, it } from 'vitest';
import {
  applyFrequencyPresencePenalties,
  applyLogitBias,
  applyMinP,
  applyRepetitionPenalty,
  applyTemperature,
  applyTopK,
  applyTopP,
  argmax,
  copySanitized,
  sanitizedArgmax,
} from '../src/engine/sampling/processors.js';
import { Xoshiro128 } from '../src/engine/sampling/rng.js';
import { TokenCounts } from '../src/engine/sampling/token-counts.js';

const NEG = -Infinity;
const f32 = (xs: number[]) => Float32Array.from(xs);
const kept = (xs: Float32Array) => [...xs.keys()].filter((i) => xs[i] > NEG);
const ln = Math.log;

describe('sanitizedArgmax', () => {
  it('is the argmax of the sanitised row: a NaN never wins, +Infinity ties with the largest float32', () => {
    const MAX = 3.4028234663852886e38;
    const specials = [NaN, Infinity, -Infinity, MAX, -MAX, 0, -0];
    const rng = new Xoshiro128(3);
    const rows = [
      [NaN, NaN],
      [NEG, NEG, NEG],
      [1, Infinity, MAX, Infinity],
      [1, MAX, Infinity],
      [2, 5, 5, NaN, 5],
      // Random rows, a third of their entries special values: ties, infinities and NaNs anywhere.
      ...Array.from({ length: 200 }, () =>
        Array.from({ length: 1 + Math.floor(rng.nextFloat() * 12) }, () =>
          rng.nextFloat() < 0.33
            ? specials[Math.floor(rng.nextFloat() * specials.length)]!
            : Math.round(rng.nextFloat() * 6) - 3,
        ),
      ),
    ];
    for (const row of rows) {
      const logits = Float32Array.from(row);
      const sanitised = new Float32Array(logits.length);
      copySanitized(logits, sanitised);
      expect(sanitizedArgmax(logits), row.join(' ')).toBe(argmax(sanitised));
    }
  });
});

describe('logit bias', () => {
  it('adds the bias to the listed ids only', () => {
    const l = f32([1, 2, 3, 4]);
    applyLogitBias(
      l,
      new Map([
        [0, -100],
        [2, 0.5],
      ]),
    );
    expect([...l]).toEqual([-99, 2, 3.5, 4]);
  });
});

describe('repetition penalty (CTRL / HF)', () => {
  it('divides positive logits, multiplies negative ones, once per distinct id', () => {
    const l = f32([2, -2, 0.5, -0.5, 3]);
    applyRepetitionPenalty(l, new TokenCounts(5, [0, 0, 1, 1, 1]), 2);
    expect([...l]).toEqual([1, -4, 0.5, -0.5, 3]);
  });
  it('a penalty below 1 encourages repeats, in both signs', () => {
    const l = f32([2, -2, 1]);
    applyRepetitionPenalty(l, new TokenCounts(3, [0, 1]), 0.5);
    expect([...l]).toEqual([4, -1, 1]);
  });
  it('ignores ids outside the row', () => {
    const l = f32([1, 1]);
    applyRepetitionPenalty(l, new TokenCounts(5, [4]), 2);
    expect([...l]).toEqual([1, 1]);
  });
});

describe('frequency and presence penalties (OpenAI)', () => {
  it('logit -= count * frequency + (count > 0) * presence', () => {
    const l = f32([1, 1, 1, 1]);
    applyFrequencyPresencePenalties(l, new TokenCounts(4, [3, 3, 3, 1]), 0.5, 1);
    expect([...l]).toEqual([1, 1 - (0.5 + 1), 1, 1 - (3 * 0.5 + 1)]);
  });
  it('negative values raise repeated tokens', () => {
    const l = f32([0, 0, 0]);
    applyFrequencyPresencePenalties(l, new TokenCounts(3, [2, 2]), -0.25, -1);
    expect([...l]).toEqual([0, 0, 1.5]);
  });
});

describe('temperature', () => {
  it('is (logit - max) / T', () => {
    const l = f32([2, 1, 0, NEG]);
    applyTemperature(l, 0.5);
    expect([...l]).toEqual([0, -2, -4, NEG]);
    const m = f32([2, 1, 0]);
    applyTemperature(m, 2);
    expect([...m]).toEqual([0, -0.5, -1]);
  });
  it('tiny temperatures give no NaN and keep tied maxima', () => {
    const l = f32([1, 0.5, 1, -3e38]);
    applyTemperature(l, 1e-40); // (0.5 - 1) / 1e-40 overflows float32: -Infinity, not NaN
    expect([...l]).toEqual([0, NEG, 0, NEG]);
  });
});

describe('top-k', () => {
  it('keeps the k largest', () => {
    const l = f32([1, 3, 2, 5, 4]);
    applyTopK(l, 2);
    expect([...l]).toEqual([NEG, NEG, NEG, 5, 4]);
  });
  it('keeps every tie with the kth value', () => {
    const l = f32([1, 3, 3, 5, 0]);
    applyTopK(l, 2);
    expect(kept(l)).toEqual([1, 2, 3]);
  });
  it('0, k >= vocab, and fewer than k finite logits are no-ops', () => {
    for (const [xs, k] of [
      [[1, 2, 3], 0],
      [[1, 2, 3], 3],
      [[NEG, 1, NEG], 2],
    ] as [number[], number][]) {
      const l = f32(xs);
      applyTopK(l, k);
      expect([...l]).toEqual(xs);
    }
  });
});

describe('top-p', () => {
  it('keeps the smallest set whose mass reaches p, stopping on an exact hit', () => {
    const cases: [number, number[]][] = [
      [0.5, [0, 1, 2, 3]], // 8 equal tokens of 1/8: 4/8 == 0.5 exactly
      [0.375, [0, 1, 2]],
      [0.5000001, [0, 1, 2, 3, 4]],
      [0.125, [0]],
      [1e-9, [0]],
      [0.9999, [0, 1, 2, 3, 4, 5, 6, 7]],
    ];
    for (const [p, ids] of cases) {
      const l = f32(new Array(8).fill(0));
      applyTopP(l, p);
      expect(kept(l), `p=${p}`).toEqual(ids);
    }
  });
  it('orders by probability, ignores filtered tokens', () => {
    const base = [ln(0.2), ln(0.5), NEG, ln(0.3)];
    const cut = (p: number) => {
      const l = f32(base);
      applyTopP(l, p);
      return kept(l);
    };
    expect(cut(0.49)).toEqual([1]);
    expect(cut(0.79)).toEqual([1, 3]);
    expect(cut(0.81)).toEqual([0, 1, 3]);
    expect(cut(1)).toEqual([0, 1, 3]);
  });
  it('equal probabilities at the cut: lower ids first', () => {
    const l = f32([0, 1, 0, 0]); // p = e/(e+3), then 1/(e+3) each
    applyTopP(l, (Math.E + 1.5) / (Math.E + 3));
    expect(kept(l)).toEqual([0, 1, 2]);
  });
});

describe('min-p', () => {
  it('keeps probability >= min_p x top probability', () => {
    const base = [ln(0.1), ln(0.4), ln(0.2), ln(0.3)]; // ratios to the top: .25 1 .5 .75
    const cut = (m: number) => {
      const l = f32(base);
      applyMinP(l, m);
      return kept(l);
    };
    expect(cut(0)).toEqual([0, 1, 2, 3]);
    expect(cut(0.24)).toEqual([0, 1, 2, 3]);
    expect(cut(0.26)).toEqual([1, 2, 3]);
    expect(cut(0.51)).toEqual([1, 3]);
    expect(cut(0.76)).toEqual([1]);
  });
  it('min_p = 1 keeps exactly the tied maxima', () => {
    const l = f32([3, 1, 3, 2.9999]);
    applyMinP(l, 1);
    expect(kept(l)).toEqual([0, 2]);
  });
});

describe('argmax', () => {
  it('picks the largest, the lowest id on ties, 0 when nothing is finite', () => {
    expect(argmax(f32([1, 5, 5, 2]))).toBe(1);
    expect(argmax(f32([NEG, NEG, -1]))).toBe(2);
    expect(argmax(f32([NEG, NEG]))).toBe(0);
  });
});

/** Naive references: full sort, float64 softmax. */
function softmax(xs: Float32Array): number[] {
  const max = Math.max(...xs);
  const w = [...xs].map((x) => (x > NEG ? Math.exp(x - max) : 0));
  const total = w.reduce((a, b) => a + b, 0);
  return w.map((x) => x / total);
}
function naiveTopK(xs: Float32Array, k: number): number[] {
  const kth = [...xs].sort((a, b) => b - a)[k - 1];
  return [...xs.keys()].filter((i) => xs[i] >= kth && xs[i] > NEG);
}
function naiveTopP(xs: Float32Array, p: number): number[] {
  const probs = softmax(xs);
  const order = [...xs.keys()].filter((i) => probs[i] > 0).sort((a, b) => probs[b] - probs[a] || a - b);
  const out: number[] = [];
  let cum = 0;
  for (const i of order) {
    out.push(i);
    cum += probs[i];
    if (cum >= p) break;
  }
  return out.sort((a, b) => a - b);
}
function naiveMinP(xs: Float32Array, m: number): number[] {
  const probs = softmax(xs);
  const top = Math.max(...probs);
  return [...xs.keys()].filter((i) => probs[i] >= m * top);
}

describe('processors match naive full-sort references', () => {
  it('on random rows with many ties', () => {
    const rng = new Xoshiro128(7);
    for (let trial = 0; trial < 300; trial++) {
      const n = 2 + (rng.nextUint32() % 30);
      const row = f32(
        Array.from({ length: n }, () => (rng.nextFloat() < 0.1 ? NEG : Math.round(rng.nextFloat() * 12 - 6) / 2)),
      );
      if (kept(row).length === 0) continue;
      const k = 1 + (rng.nextUint32() % n);
      const p = 0.05 + rng.nextFloat() * 0.9;
      const m = rng.nextFloat() * 0.6;
      const a = row.slice();
      applyTopK(a, k);
      expect(kept(a)).toEqual(kept(row).length < k ? kept(row) : naiveTopK(row, k));
      const b = row.slice();
      applyTopP(b, p);
      expect(kept(b)).toEqual(naiveTopP(row, p));
      const c = row.slice();
      applyMinP(c, m);
      expect(kept(c)).toEqual(naiveMinP(row, m));
    }
  });

  it('top-p over a 49152-token vocabulary (partial sort path)', () => {
    const rng = new Xoshiro128(11);
    const row = new Float32Array(49152);
    for (let i = 0; i < row.length; i++) row[i] = (rng.nextFloat() + rng.nextFloat() + rng.nextFloat() - 1.5) * 8;
    for (const p of [0.5, 0.9, 0.999]) {
      const b = row.slice();
      applyTopP(b, p);
      expect(kept(b)).toEqual(naiveTopP(row, p));
    }
    const a = row.slice();
    applyTopK(a, 50);
    expect(kept(a)).toEqual(naiveTopK(row, 50));
  });
});

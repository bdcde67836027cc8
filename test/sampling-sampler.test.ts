import { describe, expect, it } from 'vitest';
import { DEFAULT_SAMPLING, resolveSamplingParams, type SamplingInput } from '../src/engine/sampling/sampling-params.js';
import { randomSeed, Xoshiro128 } from '../src/engine/sampling/rng.js';
import { TokenSampler } from '../src/engine/sampling/sampler.js';

const NEG = -Infinity;

function sampler(input: SamplingInput, vocabSize: number, promptTokenIds: number[] = []): TokenSampler {
  return new TokenSampler(resolveSamplingParams(input, vocabSize), { vocabSize, promptTokenIds });
}

function run(s: TokenSampler, logits: Float32Array, steps: number): number[] {
  return Array.from({ length: steps }, () => s.sample(logits).tokenId);
}

function randomRow(rng: Xoshiro128, n: number, scale = 3): Float32Array {
  return Float32Array.from({ length: n }, () => (rng.nextFloat() - 0.5) * 2 * scale);
}

/** Chi-square 0.999 quantiles, df 1..9. */
const CHI2_999 = [NaN, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877];

function chiSquare(counts: number[], expected: number[], draws: number): { stat: number; df: number } {
  let stat = 0;
  let df = -1;
  expected.forEach((p, i) => {
    if (p === 0) return;
    df++;
    stat += (counts[i] - draws * p) ** 2 / (draws * p);
  });
  return { stat, df };
}

describe('Xoshiro128', () => {
  it('matches the C reference of xoshiro128** for this seeding', () => {
    // From Vigna's xoshiro128starstar.c, state seeded as in rng.ts (checked against a C build).
    const golden: [number, number[]][] = [
      [42, [3486340536, 720879219, 1800772308, 1071240049, 2983509599, 682812509]],
      [-1, [4238940918, 249394469, 3264414729, 3317620125, 588938548, 869795424]],
      [Number.MAX_SAFE_INTEGER, [3560910721, 2418844007, 814748018, 3503736528, 2695274518, 1828335333]],
    ];
    for (const [seed, outs] of golden) {
      const r = new Xoshiro128(seed);
      expect(outs.map(() => r.nextUint32())).toEqual(outs);
    }
  });
  it('consecutive small seeds start independent streams', () => {
    // Seeds 0..N are what users and tests pass; their first draws must not share anything.
    const firsts = Array.from({ length: 2000 }, (_, seed) => new Xoshiro128(seed).nextFloat());
    expect(new Set(firsts).size).toBe(2000);
    const mean = firsts.reduce((a, b) => a + b, 0) / firsts.length;
    expect(Math.abs(mean - 0.5)).toBeLessThan(0.03);
    const deciles = new Array<number>(10).fill(0);
    for (const x of firsts) deciles[Math.floor(x * 10)]++;
    for (const count of deciles) expect(Math.abs(count - 200)).toBeLessThan(60);
  });
  it('nextFloat is in [0, 1) and roughly uniform; random seeds are safe integers', () => {
    const r = new Xoshiro128(1);
    let sum = 0;
    for (let i = 0; i < 10_000; i++) {
      const x = r.nextFloat();
      expect(x >= 0 && x < 1).toBe(true);
      sum += x;
    }
    expect(Math.abs(sum / 10_000 - 0.5)).toBeLessThan(0.02);
    const s = randomSeed();
    expect(Number.isSafeInteger(s) && s >= 0).toBe(true);
  });
});

describe('greedy (temperature 0)', () => {
  it('picks the argmax, the lowest id on ties', () => {
    expect(sampler({ temperature: 0 }, 4).sample(Float32Array.from([1, 5, 5, 2])).tokenId).toBe(1);
    expect(sampler({ temperature: 0 }, 3).sample(Float32Array.from([7, 7, 7])).tokenId).toBe(0);
  });
  it('applies logit bias and the repetition penalty over the prompt, in both signs', () => {
    expect(sampler({ temperature: 0, logit_bias: { 2: 10 } }, 3).sample(Float32Array.from([5, 0, 0])).tokenId).toBe(2);
    expect(sampler({ temperature: 0, repetition_penalty: 2 }, 2, [0]).sample(Float32Array.from([2, 1.5])).tokenId).toBe(
      1,
    );
    expect(
      sampler({ temperature: 0, repetition_penalty: 2 }, 2, [0]).sample(Float32Array.from([-1, -1.5])).tokenId,
    ).toBe(1);
    expect(sampler({ temperature: 0 }, 2, [0]).sample(Float32Array.from([2, 1.5])).tokenId).toBe(0);
  });
  it('keeps to allowed_token_ids without logprobs too', () => {
    expect(sampler({ temperature: 0, allowed_token_ids: [2] }, 3).sample(Float32Array.from([5, 0, 0])).tokenId).toBe(2);
  });
  it('penalties follow the generated tokens step by step', () => {
    const logits = Float32Array.from([1, 0.9, 0.2]);
    // presence: a flat 0.5 once seen. [1,.9,.2] -> 0; [.5,.9,.2] -> 1; [.5,.4,.2] -> 0; same -> 0
    expect(run(sampler({ temperature: 0, presence_penalty: 0.5 }, 3), logits, 4)).toEqual([0, 1, 0, 0]);
    // frequency: 0.5 per occurrence. -> 0; [.5,.9,.2] 1; [.5,.4,.2] 0; [0,.4,.2] 1; [0,-.1,.2] 2; [0,-.1,-.3] 0
    expect(run(sampler({ temperature: 0, frequency_penalty: 0.5 }, 3), logits, 6)).toEqual([0, 1, 0, 1, 2, 0]);
  });
  it('takes the same token with no processor (one pass over the row) as through the full path', () => {
    const MAX = 3.4028234663852886e38;
    const rng = new Xoshiro128(5);
    const rows = [
      [NaN, 3, NaN, 3, 1],
      [2, Infinity, MAX, Infinity, 1], // +Infinity counts as the largest float32: the first of them
      [2, MAX, Infinity, 1, 0],
      [NEG, NEG, NEG, NEG, NEG],
      [NaN, NaN, NaN, NaN, NaN],
      [NaN, NEG, -5, NaN, -5],
      [-MAX, NEG, NaN, -1e-45, 0],
      Array.from(randomRow(rng, 5)),
    ];
    for (const row of rows) {
      const logits = Float32Array.from(row);
      // Logprobs change no token but need the scratch rows: the full path.
      const full = sampler({ temperature: 0, logprobs: true }, 5).sample(logits).tokenId;
      expect(sampler({ temperature: 0 }, 5).sample(logits).tokenId, row.join(' ')).toBe(full);
      const verified = sampler({ temperature: 0 }, 5).verify(logits, 4);
      expect(verified.tokenId, row.join(' ')).toBe(full);
      expect(verified.accepted).toBe(full === 4);
    }
    expect(() => sampler({ temperature: 0 }, 4).sample(new Float32Array(5))).toThrow(RangeError);
  });
  it("leaves the caller's logits untouched", () => {
    const logits = Float32Array.from([1, 2, 3]);
    sampler({ temperature: 0.5, logit_bias: { 0: 50 }, top_k: 1, frequency_penalty: 1 }, 3).sample(logits);
    expect([...logits]).toEqual([1, 2, 3]);
  });
});

describe('seeded sampling', () => {
  const rng = new Xoshiro128(3);
  const rows = Array.from({ length: 100 }, () => randomRow(rng, 50));
  const params: SamplingInput = { temperature: 0.9, top_p: 0.95, frequency_penalty: 0.3, repetition_penalty: 1.2 };
  const seq = (seed: number) => {
    const s = sampler({ ...params, seed }, 50, [1, 2, 3]);
    return rows.map((r) => s.sample(r).tokenId);
  };
  it('same seed gives the same sequence; different seeds differ', () => {
    expect(seq(1234)).toEqual(seq(1234));
    expect(seq(1234)).not.toEqual(seq(1235));
  });
  it('an unseeded sampler draws and reports its own seed', () => {
    const a = sampler(params, 50);
    const b = sampler(params, 50);
    expect(a.seed).not.toBe(b.seed);
    expect(seq(a.seed)).toEqual(seq(a.seed));
  });
  it('samplers of one vocabulary, stepped in turn (as a batch is), draw what each draws alone', () => {
    // They share their scratch rows: nothing of one call may leak into another's.
    const kinds: SamplingInput[] = [
      { ...params, seed: 1 },
      { temperature: 0, seed: 2, logprobs: true, top_logprobs: 3 },
      { temperature: 1.4, min_p: 0.05, presence_penalty: 0.8, seed: 3, logprobs: true, top_logprobs: 2 },
      { temperature: 0.6, top_k: 4, seed: 4 },
    ];
    // Sampler i reads the rows from the i-th on, so in each step every sampler sees other logits.
    const rowOf = (i: number, step: number) => rows[(step + i) % rows.length];
    const alone = kinds.map((k, i) => {
      const s = sampler(k, 50, [4, 5]);
      return rows.map((_, step) => s.sample(rowOf(i, step)));
    });
    const batch = kinds.map((k) => sampler(k, 50, [4, 5]));
    const inTurn = kinds.map((): ReturnType<TokenSampler['sample']>[] => []);
    for (let step = 0; step < rows.length; step++)
      for (const [i, s] of batch.entries()) inTurn[i].push(s.sample(rowOf(i, step)));
    expect(inTurn).toEqual(alone);
  });
});

describe('sampled distribution', () => {
  const DRAWS = 20_000;

  function empirical(input: SamplingInput, logits: Float32Array): number[] {
    const s = sampler({ ...input, seed: 2024 }, logits.length);
    const counts = new Array<number>(logits.length).fill(0);
    for (let i = 0; i < DRAWS; i++) counts[s.sample(logits).tokenId]++;
    return counts;
  }

  it('temperature 0.7 + top_k 5 + top_p 0.9 fits the filtered softmax (chi-square, p = 0.999)', () => {
    const raw = [0.3, 2.0, -1, 1.0, 1.5, -0.5, 0.8, 1.2, 0.1, -2];
    // Independent expectation: scale, keep the 5 largest, then the smallest top set with mass >= 0.9.
    const scaled = raw.map((x) => Math.fround(x) / 0.7);
    const order = scaled
      .map((_, i) => i)
      .sort((a, b) => scaled[b] - scaled[a])
      .slice(0, 5);
    const w = order.map((i) => Math.exp(scaled[i]));
    const z = w.reduce((a, b) => a + b);
    const nucleus: number[] = [];
    let cum = 0;
    for (const [j, i] of order.entries()) {
      nucleus.push(i);
      cum += w[j] / z;
      if (cum >= 0.9) break;
    }
    expect(nucleus).toEqual([1, 4, 7, 3]); // logits 2.0, 1.5, 1.2, 1.0: mass .81 after three, .92 after four
    const zn = nucleus.reduce((a, i) => a + Math.exp(scaled[i]), 0);
    const expected = raw.map((_, i) => (nucleus.includes(i) ? Math.exp(scaled[i]) / zn : 0));

    const counts = empirical({ temperature: 0.7, top_k: 5, top_p: 0.9 }, Float32Array.from(raw));
    counts.forEach((c, i) => {
      if (expected[i] === 0) expect(c, `filtered token ${i}`).toBe(0);
    });
    const { stat, df } = chiSquare(counts, expected, DRAWS);
    expect(df).toBe(3);
    expect(stat).toBeLessThan(CHI2_999[df]);
  });

  it('temperature 1.3 + min_p 0.2 fits too', () => {
    const raw = [1, 0, -0.5, 2, 0.5, -3, 1.8, -1, 0.2, NEG];
    const scaled = raw.map((x) => x / 1.3);
    const top = Math.max(...scaled);
    const keep = scaled.map((x) => Math.exp(x - top) >= 0.2);
    const z = scaled.reduce((a, x, i) => a + (keep[i] ? Math.exp(x) : 0), 0);
    const expected = scaled.map((x, i) => (keep[i] ? Math.exp(x) / z : 0));
    expect(keep.filter(Boolean).length).toBe(6);

    const counts = empirical({ temperature: 1.3, min_p: 0.2 }, Float32Array.from(raw));
    counts.forEach((c, i) => {
      if (expected[i] === 0) expect(c, `filtered token ${i}`).toBe(0);
    });
    const { stat, df } = chiSquare(counts, expected, DRAWS);
    expect(stat).toBeLessThan(CHI2_999[df]);
  });
});

describe('logprobs', () => {
  const rawLogSoftmax = (row: Float32Array) => {
    const max = Math.max(...row);
    const lse = max + Math.log([...row].reduce((a, x) => a + Math.exp(x - max), 0));
    return [...row].map((x) => x - lse);
  };

  it('are the log-softmax of the RAW logits, whatever the processors did', () => {
    const row = randomRow(new Xoshiro128(5), 30);
    const expected = rawLogSoftmax(row);
    const s = sampler(
      {
        temperature: 0.5,
        top_k: 3,
        logit_bias: { 17: 100 },
        presence_penalty: 1,
        logprobs: true,
        top_logprobs: 5,
        seed: 1,
      },
      30,
    );
    const out = s.sample(row);
    expect(out.tokenId).toBe(17); // biased to the top
    expect(out.logprob).toBeCloseTo(expected[17], 10);
    const best = expected
      .map((lp, tokenId) => ({ tokenId, logprob: lp }))
      .sort((a, b) => b.logprob - a.logprob)
      .slice(0, 5);
    expect(out.topLogprobs!.map((t) => t.tokenId)).toEqual(best.map((t) => t.tokenId));
    for (const [i, t] of out.topLogprobs!.entries()) expect(t.logprob).toBeCloseTo(best[i].logprob, 10);
  });

  it('top_logprobs sort by logprob, then id; absent without logprobs; [] for 0', () => {
    const row = Float32Array.from([1, 3, 2, 3, NEG, 2]);
    const out = sampler({ temperature: 0, logprobs: true, top_logprobs: 4 }, 6).sample(row);
    expect(out.topLogprobs!.map((t) => t.tokenId)).toEqual([1, 3, 2, 5]);
    expect(out.logprob).toBeCloseTo(rawLogSoftmax(row)[1], 10);
    expect(sampler({ temperature: 0, logprobs: true }, 6).sample(row).topLogprobs).toEqual([]);
    const plain = sampler({ temperature: 0 }, 6).sample(row);
    expect(plain).toEqual({ tokenId: 1 });
  });
});

describe('guards', () => {
  it('never returns NaN or a filtered token on degenerate rows', () => {
    expect(sampler({ seed: 1 }, 3).sample(Float32Array.from([NEG, NEG, NEG])).tokenId).toBe(0);
    expect(sampler({ seed: 1, temperature: 0 }, 3).sample(Float32Array.from([NEG, NEG, NEG])).tokenId).toBe(0);
    const nan = sampler({ seed: 1, logprobs: true, top_logprobs: 2 }, 3).sample(Float32Array.from([NaN, 0, NaN]));
    expect(nan.tokenId).toBe(1);
    expect(nan.logprob).toBe(0);
    expect(nan.topLogprobs![1].logprob).toBe(NEG);
    expect(sampler({ seed: 1 }, 3).sample(Float32Array.from([0, Infinity, 5])).tokenId).toBe(1);
    expect(sampler({ seed: 1, temperature: 1e-40 }, 3).sample(Float32Array.from([1, 2, 2])).tokenId).toBeOneOf([1, 2]);
  });
  it('refuses a logits row of the wrong length', () => {
    expect(() => sampler({}, 4).sample(new Float32Array(5))).toThrow(RangeError);
  });
  it('runs a 49152-token vocabulary with top_p and penalties', () => {
    const vocab = 49152;
    const row = randomRow(new Xoshiro128(9), vocab, 8);
    const s = new TokenSampler(
      { ...DEFAULT_SAMPLING, topP: 0.9, temperature: 0.8, frequencyPenalty: 0.5, seed: 3 },
      { vocabSize: vocab, promptTokenIds: [] },
    );
    for (let i = 0; i < 10; i++) {
      const t = s.sample(row).tokenId;
      expect(t >= 0 && t < vocab).toBe(true);
    }
  });
});

// Speculative decoding: greedy output identical to the target alone, token for token; sampled output
// distributed exactly as the target's (a chi-square test against the reference's probabilities, with a
// control that the test rejects the draft's own distribution); rejected positions rolled back in both
// caches; speculating requests batched beside ordinary ones.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { GenerationRequest } from '../src/engine/request.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect, loadEngine, modelDir, randomIds, SUITE_BACKEND } from './helpers/engines.js';
import type { LlamaReference } from './reference/llama-reference.js';
import { loadReference } from './reference/load-reference.js';

let engine: Engine; // tiny, with tiny-draft (its own first layer) as the draft model
let plain: Engine; // tiny alone

beforeAll(async () => {
  engine = await loadEngine(SUITE_BACKEND, 'tiny', { draft: { source: directorySource(modelDir('tiny-draft')) } });
  plain = await loadEngine(SUITE_BACKEND, 'tiny');
});

/** Prompts of three kinds: random ids, a repeated phrase (prompt lookup's home ground), and text. */
function prompts(): GenerationRequest[] {
  const phrase = randomIds(7, 6, 3, 512);
  return [
    ...[0, 1, 2, 3].map((i) => ({ prompt_ids: randomIds(600 + i, 5 + 9 * i, 3, 512) })),
    ...[2, 3, 5].map((r) => ({ prompt_ids: Array.from({ length: r }, () => phrase).flat() })),
    { prompt: 'the cat sat on the mat. the cat sat on the mat. the cat' },
  ];
}

const tokens = async (e: Engine, request: GenerationRequest): Promise<number[]> =>
  (await collect(e, request)).done.tokenIds;

describe('greedy speculation equals greedy without it', () => {
  for (const method of ['ngram', 'draft'] as const) {
    it(`${method}: every prompt, num_tokens 1 to 8, all in one batch with ordinary requests`, async () => {
      const requests = prompts().map((p) => ({ ...p, max_tokens: 40, temperature: 0, ignore_eos: true }));
      const expected = await Promise.all(requests.map((r) => tokens(plain, r)));
      const before = engine.stats();
      // Everything at once: speculating rows of every γ share each pass with plain decodes.
      const runs = requests.flatMap((r, i) => [
        ...[1, 2, 3, 4, 5, 6, 7, 8].map(async (g) => ({
          i,
          g,
          got: await tokens(engine, { ...r, speculative: { method, num_tokens: g } }),
        })),
        tokens(engine, r).then((got) => ({ i, g: 0, got })),
      ]);
      for (const { i, g, got } of await Promise.all(runs))
        expect(got, `prompt ${i}, num_tokens ${g}`).toEqual(expected[i]);
      const after = engine.stats();
      const proposed = after.proposedTokens - before.proposedTokens;
      const accepted = after.acceptedTokens - before.acceptedTokens;
      expect(proposed).toBeGreaterThan(0);
      expect(accepted, 'some proposals stand (acceptance is reported, not asserted)').toBeGreaterThan(0);
      console.log(`${method}: acceptance ${(accepted / proposed).toFixed(3)} (${accepted}/${proposed})`);
      expect(after.kv.used, 'no target block held after the last request').toBe(0);
      expect(after.draftKv!.used, 'no draft block held').toBe(0);
      engine.kv.pool.checkInvariants();
    });
  }

  it('a draft that is the target itself has every proposal accepted', async () => {
    const self = await loadEngine(SUITE_BACKEND, 'tiny', { draft: { source: directorySource(modelDir('tiny')) } });
    const request = { prompt_ids: randomIds(3, 12, 3, 512), max_tokens: 31, temperature: 0, ignore_eos: true };
    const { done } = await collect(self, { ...request, speculative: { method: 'draft', num_tokens: 4 } });
    expect(done.tokenIds).toEqual(await tokens(plain, request));
    // 1 token from the prefill, then 6 steps of 4 accepted proposals + 1 token of the target's own.
    expect(done.speculation).toEqual({ proposedTokens: 24, acceptedTokens: 24 });
    expect(self.stats().steps).toBe(7);
  });

  it('prompt lookup speeds a repetitive prompt up in steps', async () => {
    const phrase = randomIds(11, 8, 3, 512);
    const request = {
      prompt_ids: Array.from({ length: 4 }, () => phrase).flat(),
      max_tokens: 48,
      temperature: 0,
      ignore_eos: true,
    };
    const steps = async (r: GenerationRequest): Promise<number> => {
      const before = plain.stats().steps;
      await collect(plain, r);
      return plain.stats().steps - before;
    };
    const without = await steps(request);
    const withLookup = await steps({ ...request, speculative: { method: 'ngram', num_tokens: 6 } });
    expect(withLookup).toBeLessThan(without);
  });

  it('on a model that continues repeated text (tiny-copy), every prompt-lookup proposal stands', async () => {
    // tiny-copy's weights predict x[t+1] = x[t+1-8] (scripts/model/copy-weights.ts), as real models continue
    // repeated text; random models never do, which is why the test above can only ask for some acceptance.
    const copy = await loadEngine(SUITE_BACKEND, 'tiny-copy');
    const phrase = randomIds(13, 8, 3, 512);
    const request = { prompt_ids: [...phrase, ...phrase, ...phrase], max_tokens: 41, temperature: 0, ignore_eos: true };
    const plainRun = await collect(copy, request);
    expect(plainRun.done.tokenIds).toEqual(Array.from({ length: 41 }, (_, i) => phrase[i % 8]));
    const before = copy.stats().steps;
    const { done } = await collect(copy, { ...request, speculative: { method: 'ngram', num_tokens: 4 } });
    expect(done.tokenIds).toEqual(plainRun.done.tokenIds);
    // The prefill's token, then 8 passes of 4 accepted proposals + 1: 9 passes instead of 41.
    expect(done.speculation).toEqual({ proposedTokens: 32, acceptedTokens: 32 });
    expect(copy.stats().steps - before).toBe(9);
  });

  it('stops exactly at max_tokens, stop tokens and stop strings inside an accepted run', async () => {
    const phrase = randomIds(12, 5, 3, 512);
    const base = { prompt_ids: Array.from({ length: 5 }, () => phrase).flat(), temperature: 0, ignore_eos: true };
    const full = await tokens(plain, { ...base, max_tokens: 30 });
    for (const maxTokens of [1, 2, 7, 13]) {
      const got = await collect(engine, {
        ...base,
        max_tokens: maxTokens,
        speculative: { method: 'ngram', num_tokens: 8 },
      });
      expect(got.done.tokenIds).toEqual(full.slice(0, maxTokens));
      expect(got.tokens.map((t) => t.tokenId)).toEqual(full.slice(0, maxTokens));
    }
    const stopAt = full[9];
    const stopped = await collect(engine, {
      ...base,
      max_tokens: 30,
      stop_token_ids: [stopAt],
      speculative: { method: 'ngram', num_tokens: 8 },
    });
    expect(stopped.done.tokenIds).toEqual(full.slice(0, full.indexOf(stopAt) + 1));
    expect(stopped.done.finishReason).toBe('stop');
    expect(engine.stats().kv.used).toBe(0);
  });
});

describe('sampled speculation is distributed as the target', () => {
  let ref: LlamaReference;

  const PRESENCE = 0.8;
  let bias: Record<number, number> = {};

  /**
   * The target's exact next-token distribution after prompt + prefix, as the sampler draws it here:
   * reference logits, + logit_bias, − presence_penalty on generated tokens, top_k 3, temperature 1.
   */
  function top3(prompt: number[], prefix: number[]): Map<number, number> {
    ref.reset();
    const logits = Float64Array.from(ref.forward([...prompt, ...prefix], 0).at(-1)!);
    for (const [id, b] of Object.entries(bias)) logits[Number(id)] += b;
    for (const id of new Set(prefix)) logits[id] -= PRESENCE;
    const best = [...logits.keys()].sort((a, b) => logits[b] - logits[a]).slice(0, 4);
    expect(logits[best[2]] - logits[best[3]], 'no near-tie at the top-k boundary').toBeGreaterThan(1e-3);
    const z = best.slice(0, 3).reduce((s, t) => s + Math.exp(logits[t] - logits[best[0]]), 0);
    return new Map(best.slice(0, 3).map((t) => [t, Math.exp(logits[t] - logits[best[0]]) / z]));
  }

  /** The exact probability of every 3-token start of a continuation. */
  function exactJoint(prompt: number[]): Map<string, number> {
    const joint = new Map<string, number>();
    for (const [a, pa] of top3(prompt, []))
      for (const [b, pb] of top3(prompt, [a]))
        for (const [c, pc] of top3(prompt, [a, b])) joint.set([a, b, c].join(), pa * pb * pc);
    return joint;
  }

  /**
   * Pearson's chi-square of observed counts against `expected` probabilities, and its 0.001 critical
   * value. Outcomes expected fewer than 5 times are pooled into one bin, where the approximation holds.
   */
  function chiSquare(
    observed: Map<string, number>,
    expected: Map<string, number>,
    total: number,
  ): { stat: number; critical: number } {
    for (const key of observed.keys()) if (!expected.has(key)) return { stat: Infinity, critical: 0 }; // an impossible sequence
    const bins: [number, number][] = [];
    const pooled: [number, number] = [0, 0];
    for (const [key, p] of expected) {
      const bin: [number, number] = [observed.get(key) ?? 0, total * p];
      if (bin[1] >= 5) bins.push(bin);
      else {
        pooled[0] += bin[0];
        pooled[1] += bin[1];
      }
    }
    if (pooled[1] > 0) bins.push(pooled);
    const stat = bins.reduce((sum, [o, e]) => sum + (o - e) ** 2 / e, 0);
    const dof = bins.length - 1;
    const z = 3.09; // upper 0.001 quantile of N(0, 1); Wilson-Hilferty's cube-root approximation
    const critical = dof * (1 - 2 / (9 * dof) + z * Math.sqrt(2 / (9 * dof))) ** 3;
    return { stat, critical };
  }

  async function histogram(e: Engine, request: GenerationRequest, samples: number): Promise<Map<string, number>> {
    const runs = await Promise.all(Array.from({ length: samples }, (_, seed) => tokens(e, { ...request, seed })));
    const counts = new Map<string, number>();
    for (const run of runs) counts.set(run.slice(0, 3).join(), (counts.get(run.slice(0, 3).join()) ?? 0) + 1);
    return counts;
  }

  const SAMPLES = 2000;
  // Shared by every request, so the prefix cache prefills it once. Prompt lookup needs the likely next
  // tokens to occur in the context: those missing are put in front until the top 3 after it all occur.
  let prompt = randomIds(21, 120, 3, 512);
  let sampling: GenerationRequest;
  beforeAll(async () => {
    ref = await loadReference(modelDir('tiny'));
    // A bias that lifts the 4th most likely first token into play, so logit_bias shapes p.
    ref.reset();
    const first = ref.forward(prompt, 0).at(-1)!;
    bias = { [[...first.keys()].sort((a, b) => first[b] - first[a])[3]]: 2.5 };
    for (let i = 0; i < 8; i++) {
      const missing = [...top3(prompt, []).keys()].filter((t) => !prompt.includes(t));
      if (missing.length === 0) break;
      prompt = [...missing, ...prompt];
    }
    expect([...top3(prompt, []).keys()].every((t) => prompt.includes(t))).toBe(true);
    // Five tokens: after the prefill's, the first decode step verifies three proposals (positions 2-4), so
    // the first three tokens include rejections at the second proposal, not only the first.
    sampling = {
      prompt_ids: prompt,
      max_tokens: 5,
      temperature: 1,
      top_k: 3,
      presence_penalty: PRESENCE,
      logit_bias: bias,
      ignore_eos: true,
    };
  });

  for (const [method, numTokens] of [
    ['draft', 3],
    ['ngram', 3],
  ] as const) {
    it(`${method}: the first 3 tokens over ${SAMPLES} seeds follow the target's exact distribution (bias, presence penalty, top-k)`, async () => {
      const before = engine.stats();
      const observed = await histogram(
        engine,
        { ...sampling, speculative: { method, num_tokens: numTokens } },
        SAMPLES,
      );
      const { stat, critical } = chiSquare(observed, exactJoint(prompt), SAMPLES);
      expect(stat, `chi-square ${stat.toFixed(1)} vs critical ${critical.toFixed(1)}`).toBeLessThan(critical);
      expect(engine.stats().proposedTokens - before.proposedTokens).toBeGreaterThan(SAMPLES / 5);
      expect(engine.stats().kv.used).toBe(0);
    });
  }

  it('control: the same test accepts the target sampled without speculation', async () => {
    const { stat, critical } = chiSquare(await histogram(plain, sampling, SAMPLES), exactJoint(prompt), SAMPLES);
    expect(stat).toBeLessThan(critical);
  });

  it('control: the same test rejects the draft model sampled alone', async () => {
    const draftAlone = await loadEngine(SUITE_BACKEND, 'tiny-draft');
    const observed = await histogram(draftAlone, sampling, SAMPLES);
    const { stat, critical } = chiSquare(observed, exactJoint(prompt), SAMPLES);
    expect(stat).toBeGreaterThan(critical);
  });
});

describe('refusals', () => {
  it('names the bad field and changes nothing', async () => {
    const base = { prompt_ids: [5, 6, 7] };
    const cases: [unknown, string][] = [
      [{ method: 'medusa', num_tokens: 2 }, 'speculative.method'],
      [{ method: 'ngram', num_tokens: 0 }, 'speculative.num_tokens'],
      [{ method: 'ngram', num_tokens: 17 }, 'speculative.num_tokens'],
      [{ method: 'ngram', num_tokens: 2, extra: 1 }, 'speculative.extra'],
      ['ngram', 'speculative'],
    ];
    const before = engine.stats();
    for (const [speculative, param] of cases) {
      expect(() => engine.generate({ ...base, speculative } as GenerationRequest)).toThrow(InvalidRequestError);
      try {
        engine.generate({ ...base, speculative } as GenerationRequest);
      } catch (e) {
        expect((e as InvalidRequestError).param).toBe(param);
      }
    }
    expect(() => plain.generate({ ...base, speculative: { method: 'draft', num_tokens: 2 } })).toThrow(
      /no draft model/,
    );
    expect(engine.stats()).toEqual(before);
  });
});

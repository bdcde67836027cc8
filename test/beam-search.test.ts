// Beam search against exhaustive search with the independent reference forward pass: with a beam
// at least as wide as the candidates alive it must find the true best sequence, it must beat greedy where
// greedy's locally best first token leads somewhere worse, and pruned beams must leave no block behind.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { GenerationRequest } from '../src/engine/request.js';
import type { DoneEvent } from '../src/engine/sequence-output.js';
import { runArrivals } from './helpers/arrivals.js';
import { loadEngine, modelDir, randomIds, SUITE_BACKEND } from './helpers/engines.js';
import type { LlamaReference } from './reference/llama-reference.js';
import { loadReference } from './reference/load-reference.js';

const EOS = 2; // tiny's <|im_end|>; its other EOS id (0) is never allowed here
let engine: Engine;
let ref: LlamaReference;

beforeAll(async () => {
  engine = await loadEngine(SUITE_BACKEND, 'tiny', { maxBatchSize: 32 });
  ref = await loadReference(modelDir('tiny'));
});

async function beams(request: GenerationRequest, target = engine): Promise<DoneEvent[]> {
  const done: DoneEvent[] = [];
  for await (const event of target.generate(request)) {
    expect(event.type, 'beam search streams no tokens').toBe('done');
    if (event.type === 'done') done.push(event);
  }
  return done;
}

/** Reference log-probabilities over `allowed` (renormalised, as allowed_token_ids does) after prompt + prefix. */
function referenceLogprobs(prompt: number[], prefix: number[], allowed: number[]): Map<number, number> {
  ref.reset();
  const logits = ref.forward([...prompt, ...prefix], 0).at(-1)!;
  const max = Math.max(...allowed.map((t) => logits[t]));
  const lse = max + Math.log(allowed.reduce((s, t) => s + Math.exp(logits[t] - max), 0));
  return new Map(allowed.map((t) => [t, logits[t] - lse]));
}

interface Scored {
  tokens: number[];
  score: number;
}

/** Every sequence of up to maxTokens tokens over `allowed` (EOS only last), scored sum(log p) / length^α. */
function exhaustive(prompt: number[], allowed: number[], maxTokens: number, alpha: number): Scored[] {
  const out: Scored[] = [];
  const walk = (prefix: number[], logprob: number): void => {
    const next = referenceLogprobs(prompt, prefix, allowed);
    for (const [token, lp] of next) {
      const tokens = [...prefix, token];
      const sum = logprob + lp;
      const length = Math.max(1, token === EOS ? tokens.length - 1 : tokens.length);
      if (token === EOS || tokens.length === maxTokens) out.push({ tokens, score: sum / length ** alpha });
      else walk(tokens, sum);
    }
  };
  walk([], 0);
  return out.sort((a, b) => b.score - a.score);
}

describe('beam search', () => {
  const prompt = randomIds(4242, 9, 3, 512);

  for (const alpha of [0, 1, 2]) {
    it(`finds the exhaustive best when as wide as the candidates alive (length_penalty ${alpha})`, async () => {
      // Two tokens + EOS over 4 steps: at most 8 live beams, 24 continuations; width 24 keeps them all.
      const first = referenceLogprobs(
        prompt,
        [],
        Array.from({ length: 512 }, (_, i) => i),
      );
      const [a, b] = [...first]
        .filter(([t]) => t !== EOS && t !== 0)
        .sort((x, y) => y[1] - x[1])
        .map(([t]) => t);
      const allowed = [a, b, EOS];
      const truth = exhaustive(prompt, allowed, 4, alpha);
      expect(truth.length).toBe(31);
      const n = 3;
      const got = await beams({
        prompt_ids: prompt,
        max_tokens: 4,
        use_beam_search: true,
        beam_width: 24,
        n,
        length_penalty: alpha,
        early_stopping: 'never',
        allowed_token_ids: allowed,
      });
      expect(got.map((d) => d.index)).toEqual([0, 1, 2]);
      for (let i = 0; i < n; i++) {
        expect(got[i].beam!.score, `candidate ${i} score`).toBeCloseTo(truth[i].score, 4);
        // Sequences compared where the ranking is not a near-tie between float32 and float64 logits.
        if (
          truth[i].score - (truth[i + 1]?.score ?? -Infinity) > 1e-3 &&
          (i === 0 || truth[i - 1].score - truth[i].score > 1e-3)
        ) {
          expect(got[i].tokenIds, `candidate ${i}`).toEqual(truth[i].tokens);
        }
        expect(got[i].finishReason).toBe(got[i].tokenIds.at(-1) === EOS ? 'stop' : 'length');
      }
    });
  }

  it('beats greedy where the locally best first token leads to a worse sequence (width 2)', async () => {
    // Found by searching seeded prompts and token pairs (seed 104 of 0..199 is the first with a clear gap);
    // every property that makes it a trap is checked here against the reference.
    const p = randomIds(9000 + 104, 7, 3, 512);
    const allowed = randomIds(77 + 104, 2, 3, 512);
    const request = { prompt_ids: p, max_tokens: 3, allowed_token_ids: allowed, ignore_eos: true, length_penalty: 0 };
    const [greedy] = await beams({ ...request, use_beam_search: true, beam_width: 1 });
    const [beam2] = await beams({ ...request, use_beam_search: true, beam_width: 2 });
    const truth = exhaustive(p, allowed, 3, 0);
    const scoreOf = (tokens: number[]): number => truth.find((t) => t.tokens.join() === tokens.join())!.score;
    const firstStep = referenceLogprobs(p, [], allowed);
    expect(firstStep.get(greedy.tokenIds[0])!, "greedy's first token is the locally best").toBeGreaterThan(
      firstStep.get(beam2.tokenIds[0])!,
    );
    expect(scoreOf(beam2.tokenIds), "beam 2's sequence is better").toBeGreaterThan(scoreOf(greedy.tokenIds) + 0.1);
    expect(beam2.tokenIds, 'and it is the best there is').toEqual(truth[0].tokens);
    expect(greedy.beam!.score).toBeCloseTo(scoreOf(greedy.tokenIds), 4);
  });

  it('width 1 is greedy decoding', async () => {
    const request = { prompt_ids: prompt, max_tokens: 12, ignore_eos: true };
    const [beam] = await beams({ ...request, use_beam_search: true, beam_width: 1 });
    expect(beam.tokenIds).toEqual(ref.greedy(prompt, 12));
  });

  it('runs beside ordinary requests, survives preemption, and leaves no block behind', async () => {
    const small = await loadEngine(SUITE_BACKEND, 'tiny', { autoRun: false, blockSize: 4, kvCacheBytes: 18 * 4 * 512 });
    const beamRequest: GenerationRequest = {
      prompt_ids: randomIds(5, 6, 3, 512),
      max_tokens: 10,
      use_beam_search: true,
      beam_width: 4,
      n: 2,
      ignore_eos: true,
    };
    const others: GenerationRequest[] = [0, 1, 2].map((i) => ({
      prompt_ids: randomIds(50 + i, 5, 3, 512),
      max_tokens: 24,
      temperature: 0,
      ignore_eos: true,
    }));
    const results = await runArrivals(small, [
      { request: beamRequest, at: 0 },
      ...others.map((request, i) => ({ request, at: i + 1 })),
      { request: { ...beamRequest, prompt_ids: randomIds(6, 8, 3, 512) }, at: 2, cancelAt: 5 },
    ]);
    expect(small.stats().preemptions, 'the small pool forces preemption').toBeGreaterThan(0);
    expect(small.stats().copyOnWrites).toBeGreaterThan(0);
    const alone = await beams(beamRequest);
    expect(results[0].done.tokenIds).toEqual(alone[0].tokenIds);
    for (const [i, request] of others.entries())
      expect(results[i + 1].done.tokenIds).toEqual(ref.greedy(request.prompt_ids as number[], 24));
    expect(results[4].done.finishReason).toBe('cancelled');
    expect(small.stats().kv.used).toBe(0);
    small.kv.pool.checkInvariants();
  });

  it('two searches that each fit the pool alone both finish when they share it (no deadlock)', async () => {
    // Each needs 16 of the 18 blocks. A beam that computed its token waits, holding its blocks, for its
    // preempted siblings; without preempting a whole search, each would hold what the other needs.
    const small = await loadEngine(SUITE_BACKEND, 'tiny', { autoRun: false, blockSize: 4, kvCacheBytes: 18 * 4 * 512 });
    const search = (seed: number): GenerationRequest => ({
      prompt_ids: randomIds(seed, 6, 3, 512),
      max_tokens: 10,
      use_beam_search: true,
      beam_width: 4,
      n: 2,
      ignore_eos: true,
    });
    const results = await runArrivals(small, [
      { request: search(1), at: 0 },
      { request: search(2), at: 0 },
    ]);
    for (const [i, seed] of [1, 2].entries())
      expect(results[i].done.tokenIds).toEqual((await beams(search(seed)))[0].tokenIds);
    expect(small.stats().kv.used).toBe(0);
    small.kv.pool.checkInvariants();
  });

  it('early_stopping: true stops once width candidates have finished', async () => {
    const request = { prompt_ids: prompt, max_tokens: 8, use_beam_search: true, beam_width: 3, n: 3 };
    const eager = await beams({ ...request, early_stopping: true, allowed_token_ids: [5, 6, EOS] });
    const exact = await beams({ ...request, early_stopping: 'never', allowed_token_ids: [5, 6, EOS] });
    expect(eager).toHaveLength(3);
    expect(exact[0].beam!.score).toBeGreaterThanOrEqual(eager[0].beam!.score);
    expect(engine.stats().kv.used).toBe(0);
  });

  it('refuses what beam search cannot honour, by parameter name', () => {
    const base = { prompt_ids: prompt, use_beam_search: true };
    const refused: [GenerationRequest, string][] = [
      [{ ...base, temperature: 0.7 }, 'temperature'],
      [{ ...base, top_p: 0.9 }, 'top_p'],
      [{ ...base, stop: ['x'] }, 'stop'],
      [{ ...base, logprobs: true }, 'logprobs'],
      [{ ...base, speculative: { method: 'ngram', num_tokens: 2 } }, 'speculative'],
      [{ ...base, beam_width: 2, n: 3 }, 'n'],
      [{ ...base, beam_width: 33 }, 'beam_width'],
      [{ ...base, length_penalty: Number.NaN }, 'length_penalty'],
      [{ ...base, early_stopping: 'soon' as never }, 'early_stopping'],
      [{ prompt_ids: prompt, best_of: 2 }, 'best_of'],
      [{ prompt_ids: prompt, length_penalty: 2 }, 'length_penalty'],
      [{ prompt_ids: prompt, use_beam_search: false, beam_width: 4 }, 'beam_width'],
      [{ ...base, beam_width: 4, best_of: 3 }, 'best_of'],
      [{ ...base, temperature: 'hot' as never }, 'temperature'],
      [{ ...base, temperature: 0.7, max_tokens: 2000 }, 'temperature'],
    ];
    for (const [request, param] of refused) {
      expect(() => engine.generate(request), param).toThrow(InvalidRequestError);
      try {
        engine.generate(request);
      } catch (e) {
        expect((e as InvalidRequestError).param).toBe(param);
      }
    }
    expect(engine.stats().kv.used).toBe(0);
  });
});

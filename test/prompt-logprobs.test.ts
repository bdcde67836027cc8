// vLLM's prompt_logprobs on the engine: every prompt token's log-probability given the ones before it, equal
// to the float64 reference's log-softmax; computed even where the prefix cache could have skipped the
// prompt; shared by a request's n completions; bad values refused before any compute.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { PromptTokenLogprob } from '../src/engine/sampling/prompt-logprobs.js';
import { collect, loadEngine, modelDir, randomIds, SUITE_BACKEND } from './helpers/engines.js';
import { loadReference } from './reference/load-reference.js';

let engine: Engine;
beforeAll(async () => {
  engine = await loadEngine(SUITE_BACKEND);
});
afterAll(() => engine.runner.release());

/** log-softmax of the reference's logits after each prompt token, for the token that follows it. */
async function referenceLogprobs(prompt: number[]): Promise<number[]> {
  const ref = await loadReference(modelDir('tiny'));
  const rows = ref.forward(prompt, 0);
  return prompt.slice(1).map((next, p) => {
    const row = rows[p];
    let max = -Infinity;
    for (const v of row) max = Math.max(max, v);
    let sum = 0;
    for (const v of row) sum += Math.exp(v - max);
    return row[next] - max - Math.log(sum);
  });
}

describe('prompt_logprobs', () => {
  // 40 tokens: more than two KV blocks, so the prefill spans blocks (and chunks when the budget is small).
  const prompt = randomIds(7, 40, 3, 512);

  it("equals the reference's log-softmax at every position; the first token has none", async () => {
    const { done } = await collect(engine, { prompt_ids: prompt, max_tokens: 1, prompt_logprobs: 3 });
    const got = done.promptLogprobs!;
    expect(got).toHaveLength(prompt.length);
    expect(got[0]).toBeNull();
    const want = await referenceLogprobs(prompt);
    for (let p = 1; p < prompt.length; p++) {
      const entry = got[p] as PromptTokenLogprob;
      expect(entry.tokenId).toBe(prompt[p]);
      expect(Math.abs(entry.logprob - want[p - 1])).toBeLessThan(1e-4);
      expect(entry.top).toHaveLength(3);
      // Alternatives come most likely first; a token ranked within them is among them with its own logprob.
      for (let k = 1; k < 3; k++) expect(entry.top[k].logprob).toBeLessThanOrEqual(entry.top[k - 1].logprob);
      if (entry.rank <= 3) expect(entry.top[entry.rank - 1]).toEqual({ tokenId: prompt[p], logprob: entry.logprob });
      else expect(entry.logprob).toBeLessThan(entry.top[2].logprob);
    }
  });

  it('a prompt already in the prefix cache is computed again, with the same result', async () => {
    const first = await collect(engine, { prompt_ids: prompt, max_tokens: 1, prompt_logprobs: 0 });
    // Without prompt_logprobs this prompt's full blocks now come from the cache ...
    const cached = await collect(engine, { prompt_ids: prompt, max_tokens: 1 });
    expect(cached.done.metrics.cachedTokens).toBeGreaterThan(0);
    // ... with it, none do, and every position is reported.
    const again = await collect(engine, { prompt_ids: prompt, max_tokens: 1, prompt_logprobs: 0 });
    expect(again.done.metrics.cachedTokens).toBe(0);
    expect(again.done.promptLogprobs).toEqual(first.done.promptLogprobs);
    expect(again.done.promptLogprobs!.slice(1).every((e) => e !== null && e.top.length === 0)).toBe(true);
  });

  it("the n completions of a request report their prompt's log-probabilities alike", async () => {
    const dones = [];
    for await (const event of engine.generate({
      prompt_ids: prompt,
      max_tokens: 2,
      n: 2,
      temperature: 1,
      seed: 3,
      prompt_logprobs: 1,
    })) {
      if (event.type === 'done') dones.push(event);
    }
    expect(dones).toHaveLength(2);
    expect(dones[1].promptLogprobs).toEqual(dones[0].promptLogprobs);
    expect(dones[0].promptLogprobs![1]).not.toBeNull();
  });

  it('is absent unless asked for', async () => {
    const { done } = await collect(engine, { prompt_ids: prompt, max_tokens: 1 });
    expect(done.promptLogprobs).toBeUndefined();
  });

  it('refuses values outside [0, 20], naming prompt_logprobs, before anything runs', () => {
    for (const bad of [-1, 21, 1.5, '2', true]) {
      let error: unknown;
      try {
        engine.generate({ prompt_ids: prompt, max_tokens: 1, prompt_logprobs: bad as number });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidRequestError);
      expect((error as InvalidRequestError).param).toBe('prompt_logprobs');
    }
  });
});

// Constraints compose with the rest of the engine: batching (each row its own mask), n > 1, beam search
// (matchers fork with their beams), speculative decoding (proposals judged against the mask, draft and
// n-gram), logprobs and stop strings. Runs on onnxruntime-node and, in the `kernels` project, on our
// WebAssembly kernels (masks are applied in the sampler, so the runner does not matter).
import Ajv from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import type { Constrained } from '../src/engine/constraints/spec.js';
import type { GenerationRequest } from '../src/engine/request.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect, loadEngine, modelDir, SUITE_BACKEND } from './helpers/engines.js';

const schema = {
  type: 'object',
  properties: {
    id: { type: 'integer', minimum: 0, maximum: 999 },
    ok: { type: 'boolean' },
    tag: { enum: ['a', 'b', 'c'] },
  },
  required: ['id', 'ok', 'tag'],
  additionalProperties: false,
};
const constraint: Constrained = { spec: { type: 'json_schema', schema }, param: 'response_format' };
const validate = new Ajv({ strict: false }).compile(schema);
const valid = (text: string): boolean => validate(JSON.parse(text));

let engine: Engine;
beforeAll(async () => {
  engine = await loadEngine(SUITE_BACKEND, 'tiny', { draft: { source: directorySource(modelDir('tiny-draft')) } });
});
afterAll(async () => {
  await engine.runner.release();
});

const base: GenerationRequest = { prompt: 'JSON please:', temperature: 1, max_tokens: 120, constraint };

describe('composition', () => {
  it('batching: constrained and free rows share passes, each row under its own mask', async () => {
    const runs = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        collect(
          engine,
          i % 2 === 0 ? { ...base, seed: i } : { prompt: 'Free text:', temperature: 1, seed: i, max_tokens: 30 },
        ),
      ),
    );
    runs.forEach(({ done }, i) => {
      if (i % 2 === 0) expect(valid(done.text), done.text).toBe(true);
    });
    // The free rows were not held to JSON: some of them do not parse.
    expect(runs.filter((_, i) => i % 2 === 1).some(({ done }) => !done.text.trim().startsWith('{'))).toBe(true);
    // The same seeded constrained request alone gives the same tokens as inside the batch.
    const alone = await collect(engine, { ...base, seed: 0 });
    expect(alone.done.tokenIds).toEqual(runs[0].done.tokenIds);
  });

  it('n > 1: every completion has its own matcher', async () => {
    const done: string[] = [];
    for await (const e of engine.generate({ ...base, n: 6, seed: 3 })) if (e.type === 'done') done[e.index] = e.text;
    expect(done).toHaveLength(6);
    for (const text of done) expect(valid(text), text).toBe(true);
    expect(new Set(done).size).toBeGreaterThan(1);
  });

  it('beam search: beams fork their matchers; every candidate is valid', async () => {
    const texts: string[] = [];
    for await (const e of engine.generate({
      prompt: 'JSON please:',
      use_beam_search: true,
      beam_width: 4,
      n: 3,
      max_tokens: 80,
      constraint,
    })) {
      if (e.type === 'done') texts[e.index] = e.text;
    }
    expect(texts).toHaveLength(3);
    for (const text of texts) expect(valid(text), text).toBe(true);
  });

  for (const method of ['ngram', 'draft'] as const) {
    it(`speculative (${method}): proposals are judged against the mask; greedy output equals the unspeculated one`, async () => {
      for (const seed of [1, 2, 3]) {
        const sampled = await collect(engine, { ...base, seed, speculative: { method, num_tokens: 4 } });
        expect(valid(sampled.done.text), sampled.done.text).toBe(true);
        expect(sampled.done.speculation!.proposedTokens).toBeGreaterThan(0);
      }
      const plain = await collect(engine, { ...base, temperature: 0 });
      const spec = await collect(engine, { ...base, temperature: 0, speculative: { method, num_tokens: 4 } });
      expect(spec.done.tokenIds).toEqual(plain.done.tokenIds);
    });
  }

  it('logprobs are the raw model’s (as vLLM’s default): the same with and without the grammar for the same tokens', async () => {
    const constrained = await collect(engine, { ...base, temperature: 0, logprobs: true, top_logprobs: 2 });
    expect(valid(constrained.done.text)).toBe(true);
    // Feed the constrained tokens back as a prompt, one at a time is too slow; check the first token instead.
    const free = await collect(engine, {
      prompt: 'JSON please:',
      temperature: 0,
      max_tokens: 1,
      logprobs: true,
      top_logprobs: 2,
      allowed_token_ids: [constrained.tokens[0].tokenId],
    });
    expect(constrained.tokens[0].logprob).toBeCloseTo(free.tokens[0].logprob!, 5);
    for (const t of constrained.tokens) expect(t.topLogprobs).toHaveLength(2);
  });

  it('a stop string still ends a constrained completion', async () => {
    const { done } = await collect(engine, { ...base, seed: 4, stop: ['"ok"'] });
    expect(done.finishReason).toBe('stop');
    expect(done.stopReason).toBe('string');
    expect(done.text).not.toContain('"ok"');
    expect(done.text.startsWith('{')).toBe(true);
  });

  it('max_tokens cuts a constrained completion with finish reason length', async () => {
    const { done } = await collect(engine, { ...base, seed: 5, max_tokens: 3 });
    expect(done.finishReason).toBe('length');
    expect(done.tokenIds).toHaveLength(3);
  });
});

// The request lifecycle on the engine: streaming text, stop strings, stop tokens, seeds, logprobs,
// cancellation, and bad input refused before any compute with nothing changed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { GenerationRequest } from '../src/engine/request.js';
import type { DoneEvent } from '../src/engine/sequence-output.js';
import { collect, loadEngine, randomIds, SUITE_BACKEND } from './helpers/engines.js';

let engine: Engine;
beforeAll(async () => {
  engine = await loadEngine(SUITE_BACKEND);
});
afterAll(() => engine.runner.release());

describe('streaming', () => {
  it('token texts concatenate to the final text, which is the decoded completion', async () => {
    for (let seed = 1; seed <= 5; seed++) {
      const { tokens, done } = await collect(engine, {
        prompt_ids: randomIds(seed, 12, 3, 512),
        max_tokens: 48,
        temperature: 1,
        seed,
      });
      expect(tokens.map((t) => t.text).join('')).toBe(done.text);
      expect(done.text).toBe(engine.tokenizer.decode(done.tokenIds, { skipSpecialTokens: true }));
      expect(tokens.some((t) => t.text.includes('\uFFFD')) && !done.text.includes('\uFFFD')).toBe(false);
    }
  });

  it('reports usage and timing metrics', async () => {
    const { done } = await collect(engine, { prompt: 'Hello there', max_tokens: 16, temperature: 0, ignore_eos: true });
    expect(done.finishReason).toBe('length');
    expect(done.stopReason).toBeNull();
    expect(done.metrics.promptTokens).toBe(engine.tokenizer.encode('Hello there').length);
    expect(done.metrics.completionTokens).toBe(16);
    expect(done.metrics.ttftMs).toBeGreaterThan(0);
    expect(done.metrics.decodeTokensPerS).toBeGreaterThan(0);
  });

  it('a stop string ends the text before it, even when split across tokens, and is never emitted', async () => {
    const base = await collect(engine, {
      prompt: 'Once upon a time',
      max_tokens: 40,
      temperature: 0,
      ignore_eos: true,
    });
    // A stop that starts inside one token's text and ends inside a later one.
    const pieces = base.tokens.map((t) => t.text);
    let at = 0;
    let i = 0;
    while (i < pieces.length && (pieces[i].length < 2 || at < 10)) at += pieces[i++].length;
    const stop = base.done.text.slice(at + 1, at + pieces[i].length + 2);
    const expected = base.done.text.slice(0, base.done.text.indexOf(stop));
    const { tokens, done } = await collect(engine, {
      prompt: 'Once upon a time',
      max_tokens: 40,
      temperature: 0,
      ignore_eos: true,
      stop: [stop],
    });
    expect(done.finishReason).toBe('stop');
    expect(done.stopReason).toBe('string');
    expect(done.text).toBe(expected);
    expect(tokens.map((t) => t.text).join('')).toBe(expected);
  });

  it('stop_token_ids and EOS end the generation without emitting the token as text', async () => {
    const base = await collect(engine, { prompt_ids: [5, 6, 7], max_tokens: 20, temperature: 0, ignore_eos: true });
    const stopId = base.done.tokenIds[5];
    const { done } = await collect(engine, {
      prompt_ids: [5, 6, 7],
      max_tokens: 20,
      temperature: 0,
      stop_token_ids: [stopId],
    });
    expect(done.finishReason).toBe('stop');
    expect(done.stopReason).toBe(stopId);
    expect(done.tokenIds).toEqual(base.done.tokenIds.slice(0, base.done.tokenIds.indexOf(stopId) + 1));
    expect(done.text).toBe(engine.tokenizer.decode(done.tokenIds.slice(0, -1), { skipSpecialTokens: true }));
  });

  it('the same seed gives the same tokens; another seed gives others', async () => {
    const request: GenerationRequest = {
      prompt: 'The weather',
      max_tokens: 32,
      temperature: 1.2,
      top_p: 0.95,
      seed: 1234,
      ignore_eos: true,
    };
    const a = await collect(engine, request);
    const b = await collect(engine, request);
    const c = await collect(engine, { ...request, seed: 4321 });
    expect(b.done.tokenIds).toEqual(a.done.tokenIds);
    expect(c.done.tokenIds).not.toEqual(a.done.tokenIds);
  });

  it('logprobs: each token carries its own log-probability and the top alternatives', async () => {
    const { tokens } = await collect(engine, {
      prompt: 'Hi',
      max_tokens: 5,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
      ignore_eos: true,
    });
    for (const t of tokens) {
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.topLogprobs).toHaveLength(3);
      expect(t.topLogprobs![0].tokenId).toBe(t.tokenId); // greedy picks the most likely token
      expect(t.topLogprobs![0].logprob).toBeCloseTo(t.logprob!, 6);
    }
  });

  it('chat messages are rendered with the chat template', async () => {
    const messages = [{ role: 'user', content: 'Hello!' }];
    const resolved = engine.resolve({ messages });
    expect(engine.tokenizer.decode(resolved.promptIds)).toBe(
      '<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n',
    );
  });
});

describe('cancellation', () => {
  it('leaving the stream early cancels the request and frees its blocks', async () => {
    const before = engine.stats().kv;
    let seen = 0;
    for await (const event of engine.generate({
      prompt: 'Cancel me',
      max_tokens: 200,
      temperature: 0,
      ignore_eos: true,
    })) {
      if (event.type === 'token' && ++seen === 3) break;
    }
    while (engine.busy) await new Promise((r) => setTimeout(r, 5));
    expect(engine.stats().kv.used).toBe(before.used);
    expect(engine.stats().running).toBe(0);
  });

  it('an aborted signal ends the request with finish reason cancelled', async () => {
    const controller = new AbortController();
    const events = engine.generate(
      { prompt: 'Abort me', max_tokens: 200, temperature: 0, ignore_eos: true },
      { signal: controller.signal },
    );
    let done: DoneEvent | undefined;
    let count = 0;
    for await (const event of events) {
      if (event.type === 'token' && ++count === 2) controller.abort();
      if (event.type === 'done') done = event;
    }
    expect(done!.finishReason).toBe('cancelled');
    expect(done!.tokenIds.length).toBeLessThan(10);
  });
});

describe('bad input is refused before any compute, and changes nothing', () => {
  const cases: [string, GenerationRequest, string][] = [
    ['empty prompt', { prompt: '' }, 'prompt'],
    ['empty prompt_ids', { prompt_ids: [] }, 'prompt_ids'],
    ['two prompts', { prompt: 'a', prompt_ids: [1] }, 'prompt_ids'],
    ['no prompt', {}, 'prompt'],
    ['prompt past the window', { prompt_ids: new Array(2048).fill(5) }, 'prompt'],
    ['max_tokens 0', { prompt: 'hi', max_tokens: 0 }, 'max_tokens'],
    ['max_tokens past the window', { prompt: 'hi', max_tokens: 2048 }, 'max_tokens'],
    ['max_tokens not an integer', { prompt: 'hi', max_tokens: 1.5 }, 'max_tokens'],
    ['top_p 0', { prompt: 'hi', top_p: 0 }, 'top_p'],
    ['top_p above 1', { prompt: 'hi', top_p: 1.5 }, 'top_p'],
    ['negative temperature', { prompt: 'hi', temperature: -0.5 }, 'temperature'],
    ['NaN temperature', { prompt: 'hi', temperature: NaN }, 'temperature'],
    ['NaN top_k', { prompt: 'hi', top_k: NaN }, 'top_k'],
    ['out-of-vocabulary id', { prompt_ids: [1, 512] }, 'prompt_ids'],
    ['negative id', { prompt_ids: [-1] }, 'prompt_ids'],
    ['fractional id', { prompt_ids: [1.5] }, 'prompt_ids'],
    ['bad stop', { prompt: 'hi', stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    ['bad stop token', { prompt: 'hi', stop_token_ids: [9999] }, 'stop_token_ids'],
    ['bad logit_bias', { prompt: 'hi', logit_bias: { 5: 200 } }, 'logit_bias'],
    ['bad messages', { messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
    ['min_p above 1', { prompt: 'hi', min_p: 2 }, 'min_p'],
    ['frequency_penalty too big', { prompt: 'hi', frequency_penalty: 3 }, 'frequency_penalty'],
    ['n 0', { prompt: 'hi', n: 0 }, 'n'],
    ['n past the batch size', { prompt: 'hi', n: 1000 }, 'n'],
    ['seed + n - 1 past the safe integers', { prompt: 'hi', n: 2, seed: Number.MAX_SAFE_INTEGER }, 'seed'],
    ['empty allowed_token_ids', { prompt: 'hi', allowed_token_ids: [] }, 'allowed_token_ids'],
  ];
  for (const [name, request, param] of cases) {
    it(`${name} → InvalidRequestError(${param})`, () => {
      const before = engine.stats();
      let error: unknown;
      try {
        engine.generate(request);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidRequestError);
      expect((error as InvalidRequestError).param).toBe(param);
      expect(engine.stats()).toEqual(before);
    });
  }

  it('the engine keeps serving after refusing', async () => {
    const { done } = await collect(engine, { prompt: 'still alive', max_tokens: 4, temperature: 0, ignore_eos: true });
    expect(done.tokenIds).toHaveLength(4);
  });
});

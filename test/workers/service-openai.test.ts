// The OpenAI-compatible routes end to end inside workerd: worker → InferenceObject → engine, streamed and
// not, with the response shapes OpenAI clients parse.
import { describe, expect, it } from 'vitest';
import { call, expectError, postJson, post, readSse, scrape } from './service-helpers.js';
import type { ChatChunk, ChatCompletion, Completion, CompletionChunk } from './openai-wire.js';

const user = (content: string) => [{ role: 'user', content }];
const greedy = { temperature: 0, ignore_eos: true };

describe('GET /v1/models', () => {
  it('lists the served model', async () => {
    const res = await call('/v1/models');
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { runner: string | null; weights: { shared_by: number | null } }[] };
    // runner: planned from config.json before a shard has loaded the model, the loaded one's after.
    expect(body).toEqual({
      object: 'list',
      data: [
        {
          id: 'tiny',
          object: 'model',
          created: expect.any(Number),
          owned_by: 'edge-infer',
          max_model_len: 2048,
          backend: 'wasm',
          runner: body.data[0].runner,
          weights: { shared: 'per isolate', shared_by: body.data[0].weights.shared_by },
          // No PIPELINE_STAGES here: the model is served whole.
          stages: null,
          // No GPU_HOST_URL: the objects run the model themselves.
          gpu_host: null,
        },
      ],
    });
    expect(body.data[0].runner).toBe('kernels');
    const one = await call('/v1/models/tiny');
    expect(((await one.json()) as { id: string }).id).toBe('tiny');
  });
});

describe('POST /v1/chat/completions', () => {
  it('answers in the chat.completion shape with usage', async () => {
    const body = await postJson<ChatCompletion>('/v1/chat/completions', {
      model: 'tiny',
      messages: user('Hi'),
      max_tokens: 8,
      ...greedy,
    });
    expect(body).toEqual({
      id: expect.stringMatching(/^chatcmpl-/),
      object: 'chat.completion',
      created: expect.any(Number),
      model: 'tiny',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: expect.any(String), refusal: null },
          logprobs: null,
          finish_reason: 'length',
        },
      ],
      usage: {
        prompt_tokens: expect.any(Number),
        completion_tokens: 8,
        total_tokens: expect.any(Number),
        prompt_tokens_details: { cached_tokens: expect.any(Number) },
      },
      system_fingerprint: null,
    });
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + 8);
    expect(body.usage.prompt_tokens).toBeGreaterThan(3);
  });

  it('streams chunks that add up to the non-streamed answer, then usage, then [DONE]', async () => {
    const request = { messages: user('Tell me a story'), max_tokens: 12, ...greedy };
    const whole = await postJson<ChatCompletion>('/v1/chat/completions', request);
    const { events, done } = await readSse<ChatChunk>(
      await post('/v1/chat/completions', { ...request, stream: true, stream_options: { include_usage: true } }),
    );
    expect(done).toBe(true);
    expect(
      events.every((e) => e.object === 'chat.completion.chunk' && e.id === events[0].id && e.model === 'tiny'),
    ).toBe(true);
    expect(events[0].choices[0]).toEqual({
      index: 0,
      delta: { role: 'assistant', content: '' },
      logprobs: null,
      finish_reason: null,
    });
    const last = events.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ ...whole.usage, prompt_tokens_details: { cached_tokens: expect.any(Number) } });
    const finish = events.at(-2)!;
    expect(finish.choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: 'length' }]);
    expect(events.slice(0, -1).every((e) => e.usage === null)).toBe(true);
    const text = events
      .slice(1, -2)
      .map((e) => e.choices[0].delta.content)
      .join('');
    expect(text).toBe(whole.choices[0].message.content);
  });

  it('streams without usage chunks unless asked', async () => {
    const { events, done } = await readSse<ChatChunk>(
      await post('/v1/chat/completions', { messages: user('Hi'), max_tokens: 3, stream: true, ...greedy }),
    );
    expect(done).toBe(true);
    expect(events.every((e) => !('usage' in e) && e.choices.length === 1)).toBe(true);
    expect(events.at(-1)!.choices[0].finish_reason).toBe('length');
  });

  it('reports cached prompt tokens when a long prompt repeats', async () => {
    const messages = [
      {
        role: 'system',
        content: 'You are a terse assistant who answers questions about the weather in one short line.',
      },
      ...user('Rain?'),
    ];
    const first = await postJson<ChatCompletion>('/v1/chat/completions', { messages, max_tokens: 2, ...greedy });
    const second = await postJson<ChatCompletion>('/v1/chat/completions', { messages, max_tokens: 2, ...greedy });
    expect(first.usage.prompt_tokens).toBeGreaterThan(32);
    expect(second.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(16);
    expect(second.usage.prompt_tokens_details.cached_tokens).toBeLessThan(second.usage.prompt_tokens);
    expect(second.choices[0].message.content).toBe(first.choices[0].message.content);
  });

  it('gives n choices, indexed, choice i seeded with seed + i', async () => {
    const request = {
      messages: user('Once upon a time'),
      max_tokens: 10,
      temperature: 1.5,
      seed: 11,
      ignore_eos: true,
    };
    const both = await postJson<ChatCompletion>('/v1/chat/completions', { ...request, n: 2 });
    expect(both.choices.map((c: { index: number }) => c.index)).toEqual([0, 1]);
    expect(both.usage.completion_tokens).toBe(20);
    const zero = await postJson<ChatCompletion>('/v1/chat/completions', request);
    const one = await postJson<ChatCompletion>('/v1/chat/completions', { ...request, seed: 12 });
    expect(both.choices[0].message.content).toBe(zero.choices[0].message.content);
    expect(both.choices[1].message.content).toBe(one.choices[0].message.content);
    expect(both.usage.prompt_tokens).toBe(zero.usage.prompt_tokens);

    const { events } = await readSse<ChatChunk>(await post('/v1/chat/completions', { ...request, n: 2, stream: true }));
    const text = [0, 1].map((i) =>
      events
        .filter((e) => e.choices[0]?.index === i)
        .map((e) => e.choices[0].delta.content ?? '')
        .join(''),
    );
    expect(text).toEqual(both.choices.map((c: { message: { content: string } }) => c.message.content));
  });

  it('is deterministic for a seed', async () => {
    const request = {
      messages: user('Pick a word'),
      max_tokens: 16,
      temperature: 1.2,
      top_k: 40,
      top_p: 0.95,
      min_p: 0.01,
      repetition_penalty: 1.1,
      seed: 1234,
      ignore_eos: true,
    };
    const a = await postJson<ChatCompletion>('/v1/chat/completions', request);
    const b = await postJson<ChatCompletion>('/v1/chat/completions', request);
    expect(a.choices[0].message.content).toBe(b.choices[0].message.content);
  });

  it('returns logprobs with top alternatives, streamed and not', async () => {
    const request = { messages: user('Hi'), max_tokens: 5, logprobs: true, top_logprobs: 3, ...greedy };
    const body = await postJson<ChatCompletion>('/v1/chat/completions', request);
    const content = body.choices[0].logprobs!.content;
    expect(body.choices[0].logprobs!.refusal).toBeNull();
    expect(content).toHaveLength(5);
    for (const entry of content) {
      expect(Object.keys(entry).sort()).toEqual(['bytes', 'logprob', 'token', 'top_logprobs']);
      expect(entry.logprob).toBeLessThanOrEqual(0);
      expect(entry.bytes.every((b: number) => Number.isInteger(b) && b >= 0 && b < 256)).toBe(true);
      expect(entry.top_logprobs).toHaveLength(3);
      expect(entry.top_logprobs[0]).toEqual({ token: entry.token, logprob: entry.logprob, bytes: entry.bytes }); // greedy: the top one
      const lps = entry.top_logprobs.map((t: { logprob: number }) => t.logprob);
      expect([...lps].sort((x, y) => y - x)).toEqual(lps);
    }
    const { events } = await readSse<ChatChunk>(await post('/v1/chat/completions', { ...request, stream: true }));
    const streamed = events.flatMap((e) => e.choices[0]?.logprobs?.content ?? []);
    expect(streamed).toEqual(content);
  });

  it('stops at a stop string and leaves it out', async () => {
    const base = { messages: user('Write something long'), max_tokens: 24, ...greedy };
    const text: string = (await postJson<ChatCompletion>('/v1/chat/completions', base)).choices[0].message.content;
    const stop = text.slice(6, 9);
    const cut = text.slice(0, text.indexOf(stop));
    const stopped = await postJson<ChatCompletion>('/v1/chat/completions', { ...base, stop: [stop, 'never-seen-xyz'] });
    expect(stopped.choices[0]).toMatchObject({ message: { content: cut }, finish_reason: 'stop' });
    const { events } = await readSse<ChatChunk>(await post('/v1/chat/completions', { ...base, stop, stream: true }));
    expect(events.map((e) => e.choices[0]?.delta?.content ?? '').join('')).toBe(cut);
    expect(events.at(-1)!.choices[0].finish_reason).toBe('stop');
  });

  it('accepts max_completion_tokens, text content parts and the developer role', async () => {
    const body = await postJson<ChatCompletion>('/v1/chat/completions', {
      messages: [
        { role: 'developer', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Hi ' },
            { type: 'text', text: 'there' },
          ],
        },
      ],
      max_completion_tokens: 4,
      ...greedy,
    });
    expect(body.usage.completion_tokens).toBe(4);
  });
});

describe('POST /v1/completions', () => {
  it('answers in the text_completion shape, streamed and not', async () => {
    const request = { model: 'tiny', prompt: 'Hello there', max_tokens: 10, ...greedy };
    const body = await postJson<Completion>('/v1/completions', request);
    expect(body).toEqual({
      id: expect.stringMatching(/^cmpl-/),
      object: 'text_completion',
      created: expect.any(Number),
      model: 'tiny',
      choices: [{ index: 0, text: expect.any(String), logprobs: null, finish_reason: 'length' }],
      usage: {
        prompt_tokens: expect.any(Number),
        completion_tokens: 10,
        total_tokens: expect.any(Number),
        prompt_tokens_details: { cached_tokens: expect.any(Number) },
      },
      system_fingerprint: null,
    });
    const { events, done } = await readSse<CompletionChunk>(
      await post('/v1/completions', { ...request, stream: true, stream_options: { include_usage: true } }),
    );
    expect(done).toBe(true);
    expect(events.every((e) => e.object === 'text_completion')).toBe(true);
    expect(
      events
        .slice(0, -1)
        .map((e) => e.choices[0].text)
        .join(''),
    ).toBe(body.choices[0].text);
    expect(events.at(-2)!.choices[0]).toEqual({ index: 0, text: '', logprobs: null, finish_reason: 'length' });
    expect(events.at(-1)).toMatchObject({
      choices: [],
      usage: { completion_tokens: 10, prompt_tokens: body.usage.prompt_tokens },
    });
  });

  it('takes token ids and lists of prompts; choices are indexed prompt-major', async () => {
    const ids = await postJson<Completion>('/v1/completions', { prompt: [5, 6, 7, 8], max_tokens: 3, ...greedy });
    expect(ids.usage.prompt_tokens).toBe(4);
    const idBatch = await postJson<Completion>('/v1/completions', {
      prompt: [
        [9, 10, 11],
        [5, 6, 7, 8],
      ],
      max_tokens: 3,
      ...greedy,
    });
    expect(idBatch.choices[1].text).toBe(ids.choices[0].text);
    expect(idBatch.usage.prompt_tokens).toBe(7);
    const single = await postJson<Completion>('/v1/completions', {
      prompt: 'General Kenobi',
      max_tokens: 3,
      ...greedy,
    });
    const batch = await postJson<Completion>('/v1/completions', {
      prompt: ['Hello there', 'General Kenobi'],
      n: 2,
      max_tokens: 3,
      ...greedy,
    });
    expect(batch.choices.map((c: { index: number }) => c.index)).toEqual([0, 1, 2, 3]);
    expect(batch.choices[2].text).toBe(single.choices[0].text);
    expect(batch.choices[3].text).toBe(single.choices[0].text);
    expect(batch.usage.completion_tokens).toBe(12);
  });

  it('returns legacy logprobs', async () => {
    const body = await postJson<Completion>('/v1/completions', {
      prompt: 'Hello',
      max_tokens: 6,
      logprobs: 2,
      ...greedy,
    });
    const lp = body.choices[0].logprobs!;
    expect(Object.keys(lp).sort()).toEqual(['text_offset', 'token_logprobs', 'tokens', 'top_logprobs']);
    expect(lp.tokens).toHaveLength(6);
    expect(lp.token_logprobs).toHaveLength(6);
    expect(
      lp.top_logprobs.every((t: Record<string, number>) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2),
    ).toBe(true);
    expect(lp.text_offset[0]).toBe(0);
    expect([...lp.text_offset].sort((a, b) => a - b)).toEqual(lp.text_offset);
    for (const [i, t] of lp.tokens.entries()) expect(lp.top_logprobs[i][t]).toBe(lp.token_logprobs[i]);
  });

  it("returns vLLM's prompt_logprobs per choice, streamed and not; refuses a bad value by name", async () => {
    const prompt = [5, 6, 7, 8, 9];
    const request = { prompt, max_tokens: 2, prompt_logprobs: 1, ...greedy };
    const body = await postJson<Completion>('/v1/completions', request);
    const entries = body.choices[0].prompt_logprobs!;
    expect(entries).toHaveLength(prompt.length);
    expect(entries[0]).toBeNull();
    for (const [p, entry] of entries.slice(1).entries()) {
      // The prompt token itself, and the one most likely alternative (which it may be).
      const own = entry![String(prompt[p + 1])];
      expect(own).toEqual({ logprob: expect.any(Number), rank: expect.any(Number), decoded_token: expect.any(String) });
      expect(own.logprob).toBeLessThanOrEqual(0);
      expect(Object.keys(entry!).length).toBe(own.rank === 1 ? 1 : 2);
    }
    const { events } = await readSse<CompletionChunk>(await post('/v1/completions', { ...request, stream: true }));
    const finish = events.find((e) => e.choices[0]?.finish_reason);
    expect((finish!.choices[0] as { prompt_logprobs?: unknown }).prompt_logprobs).toEqual(entries);
    await expectError(await post('/v1/completions', { ...request, prompt_logprobs: 21 }), 400, 'prompt_logprobs');
  });
});

describe('beam search and speculative decoding over HTTP', () => {
  it('beam search returns the n best of its beams, best first, with their scores', async () => {
    const request = { prompt: 'Once upon a time', max_tokens: 6, ignore_eos: true };
    const body = await postJson<Completion>('/v1/completions', {
      ...request,
      use_beam_search: true,
      best_of: 4,
      n: 2,
      length_penalty: 1,
    });
    expect(body.choices).toHaveLength(2);
    const [first, second] = body.choices;
    expect(first).toEqual({
      index: 0,
      text: expect.any(String),
      logprobs: null,
      finish_reason: 'length',
      beam_score: expect.any(Number),
      cumulative_logprob: expect.any(Number),
    });
    expect(first.beam_score).toBeGreaterThanOrEqual(second.beam_score!);
    expect(first.beam_score).toBeCloseTo(first.cumulative_logprob! / 6, 6);
    expect(body.usage.completion_tokens).toBe(12);
    // Its best sequence scores at least as well as greedy's.
    const greedyBeam = await postJson<Completion>('/v1/completions', {
      ...request,
      use_beam_search: true,
      beam_width: 1,
    });
    expect(first.beam_score).toBeGreaterThanOrEqual(greedyBeam.choices[0].beam_score! - 1e-9);
  });

  it('chat with beam search answers non-streamed; streamed it is a 400', async () => {
    const body = await postJson<ChatCompletion>('/v1/chat/completions', {
      messages: user('Hi'),
      max_tokens: 4,
      use_beam_search: true,
      beam_width: 3,
    });
    expect(body.choices).toHaveLength(1);
    expect(body.choices[0].beam_score).toEqual(expect.any(Number));
  });

  it('speculative decoding gives the same greedy text, and the metrics count its proposals', async () => {
    const prompt = 'the cat sat on the mat. the cat sat on the mat. the cat sat on the mat.';
    const request = { prompt, max_tokens: 24, ...greedy };
    const plain = await postJson<Completion>('/v1/completions', request);
    const before = await scrape();
    const fast = await postJson<Completion>('/v1/completions', {
      ...request,
      speculative: { method: 'ngram', num_tokens: 4 },
    });
    expect(fast.choices[0].text).toBe(plain.choices[0].text);
    const after = await scrape();
    const total = (m: Map<string, number>, name: string): number =>
      [...m].filter(([k]) => k.startsWith(name)).reduce((sum, [, v]) => sum + v, 0);
    expect(total(after, 'edge_infer_speculative_proposed_tokens_total')).toBeGreaterThan(
      total(before, 'edge_infer_speculative_proposed_tokens_total'),
    );
  });
});

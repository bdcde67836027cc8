// Bad requests of every kind get the right status and an OpenAI error body, and the service keeps
// answering afterwards; bearer-key auth on and off.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import app from '../../src/worker/app.js';
import { call, expectError, post, postJson, scrape, total } from './service-helpers.js';
import type { ChatCompletion } from './openai-wire.js';

const chat = (extra: Record<string, unknown>) => ({
  messages: [{ role: 'user', content: 'Hi' }],
  max_tokens: 2,
  ...extra,
});
const MiB = 1 << 20;

/** A body of `bytes` spaces sent in chunks, without a Content-Length to refuse it by. */
const chunkedBody = (bytes: number): ReadableStream<Uint8Array> =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      for (let left = bytes; left > 0; left -= 300_000)
        controller.enqueue(new Uint8Array(Math.min(left, 300_000)).fill(32));
      controller.close();
    },
  });

/** Engine gauges that bad input must leave exactly as they were. */
const gauges = async (): Promise<number[]> => {
  const m = await scrape();
  return [
    'edge_infer_kv_blocks_used',
    'edge_infer_running_requests',
    'edge_infer_queue_depth',
    'edge_infer_pinned_sessions',
  ].map((name) => total(m, name));
};

describe('request errors', () => {
  let before: number[];
  it('(a baseline: a served request, so every shard the bad ones reach has its engine)', async () => {
    await postJson('/v1/completions', { prompt: 'warm', max_tokens: 2 });
    await postJson('/v1/chat/completions', chat({ temperature: 0 }));
    before = await gauges();
  });

  it('malformed JSON and non-object bodies are 400 invalid_json', async () => {
    await expectError(await post('/v1/chat/completions', '{"messages": ['), 400, null, 'invalid_json');
    await expectError(await post('/v1/completions', '[1, 2]'), 400, null, 'invalid_json');
    await expectError(await post('/v1/completions', ''), 400, null, 'invalid_json');
  });

  it.each([
    ['temperature', chat({ temperature: 'hot' })],
    ['max_tokens', chat({ max_tokens: '5' })],
    ['max_tokens', chat({ max_tokens: 1.5 })],
    ['max_completion_tokens', chat({ max_completion_tokens: true })],
    ['top_p', chat({ top_p: [1] })],
    ['top_k', chat({ top_k: '3' })],
    ['seed', chat({ seed: 'x' })],
    ['stop', chat({ stop: 5 })],
    ['stop', chat({ stop: ['a', 3] })],
    ['n', chat({ n: '2' })],
    ['stream', chat({ stream: 'yes' })],
    ['stream_options', chat({ stream: true, stream_options: 3 })],
    ['logprobs', chat({ logprobs: 1 })],
    ['logit_bias', chat({ logit_bias: { '5': 'x' } })],
    ['logit_bias', chat({ logit_bias: [1] })],
    ['messages', { messages: 'Hi' }],
    ['messages', { messages: [] }],
    ['messages', {}],
    ['messages[0]', { messages: ['Hi'] }],
    ['messages[0].role', { messages: [{ content: 'Hi' }] }],
    ['messages[0].role', { messages: [{ role: 'wizard', content: 'Hi' }] }],
    ['messages[0].content', { messages: [{ role: 'user', content: 5 }] }],
    ['messages[0].content[0]', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] }],
    ['model', chat({ model: 7 })],
    ['tools', chat({ tools: [] })],
    ['tools[0].type', chat({ tools: [{ name: 'f' }] })],
    ['tool_choice', chat({ tool_choice: 'required' })],
    [
      'tool_choice.function.name',
      chat({
        tools: [{ type: 'function', function: { name: 'f' } }],
        tool_choice: { type: 'function', function: { name: 'g' } },
      }),
    ],
    ['response_format.type', chat({ response_format: { type: 'xml' } })],
    [
      'response_format.json_schema.schema',
      chat({
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'x', schema: { type: 'object', properties: { a: { not: {} } } } },
        },
      }),
    ],
    ['structured_outputs', chat({ structured_outputs: { regex: 'a', choice: ['b'] } })],
    ['guided_regex', chat({ response_format: { type: 'json_object' }, guided_regex: 'a+' })],
    ['structured_outputs.grammar', chat({ structured_outputs: { grammar: 'root ::= "a" |' } })],
    ['top_logprobs', chat({ top_logprobs: 2 })],
    ['stream', chat({ use_beam_search: true, stream: true })],
    ['stream', chat({ beam_width: 2, stream: true })],
    ['use_beam_search', chat({ use_beam_search: 'yes' })],
    ['early_stopping', chat({ use_beam_search: true, early_stopping: 'soon' })],
    ['speculative', chat({ speculative: 'ngram' })],
    ['allowed_token_ids', chat({ allowed_token_ids: 'all' })],
  ])('chat: a wrong %s is a 400 naming it', async (param, body) => {
    await expectError(await post('/v1/chat/completions', body), 400, param);
  });

  it.each([
    ['prompt', { max_tokens: 2 }],
    ['prompt', { prompt: 5 }],
    ['prompt', { prompt: [] }],
    ['prompt', { prompt: ['a', 1] }],
    ['logprobs', { prompt: 'Hi', logprobs: true }],
    ['echo', { prompt: 'Hi', echo: true }],
    ['suffix', { prompt: 'Hi', suffix: '!' }],
  ])('completions: a wrong %s is a 400 naming it', async (param, body) => {
    await expectError(await post('/v1/completions', body), 400, param);
  });

  it.each([
    ['top_p', chat({ top_p: 2 })],
    ['temperature', chat({ temperature: -1 })],
    ['top_logprobs', chat({ logprobs: true, top_logprobs: 50 })],
    ['max_tokens', chat({ max_tokens: 0 })],
    ['max_tokens', chat({ max_tokens: 100_000 })],
    ['logit_bias', chat({ logit_bias: { '99999': 1 } })],
    ['seed', chat({ seed: 1.5 })],
    ['temperature', chat({ use_beam_search: true, temperature: 0.8 })],
    ['n', chat({ beam_width: 2, n: 3 })],
    ['best_of', chat({ best_of: 3 })],
    ['speculative.method', chat({ speculative: { method: 'draft', num_tokens: 2 } })],
    ['speculative.num_tokens', chat({ speculative: { method: 'ngram', num_tokens: 99 } })],
    ['allowed_token_ids', chat({ allowed_token_ids: [99999] })],
  ])('values the engine refuses (%s) are 400 with its param and code', async (param, body) => {
    const error = await expectError(await post('/v1/chat/completions', body), 400, param);
    expect(error.type).toBe('invalid_request_error');
  });

  it('a prompt past the context window is context_length_exceeded; logprobs range is named as logprobs in completions', async () => {
    await expectError(
      await post('/v1/completions', { prompt: Array(2048).fill(5) }),
      400,
      'prompt',
      'context_length_exceeded',
    );
    await expectError(await post('/v1/completions', { prompt: 'Hi', logprobs: 50 }), 400, 'logprobs');
  });

  it('an unknown model is 404 model_not_found', async () => {
    await expectError(await post('/v1/chat/completions', chat({ model: 'gpt-9' })), 404, 'model', 'model_not_found');
    await expectError(await call('/v1/models/gpt-9'), 404, 'model', 'model_not_found');
  });

  it('unknown routes and methods are 404 in the same schema', async () => {
    await expectError(await call('/v1/nothing-here'), 404, null, 'not_found');
    await expectError(await call('/v1/chat/completions'), 404, null, 'not_found');
  });

  it('a body over MAX_BODY_BYTES is 413, by Content-Length and by counting a chunked body', async () => {
    const big = JSON.stringify(chat({ padding: 'x'.repeat(MiB) }));
    await expectError(await post('/v1/chat/completions', big), 413, null, 'request_too_large');
    await expectError(
      await call('/v1/chat/completions', { method: 'POST', body: chunkedBody(1_500_000) }),
      413,
      null,
      'request_too_large',
    );
  });

  it('an inbound webhook (no key needed) is counted too: a chunked oversized body is 413 before it is buffered', async () => {
    await expectError(
      await call('/v1/hooks/anything', { method: 'POST', body: chunkedBody(1_500_000) }),
      413,
      null,
      'request_too_large',
    );
  });

  it('none of it changed the engine: no blocks held, nothing running, queued or pinned', async () => {
    expect(await gauges()).toEqual(before);
  });

  it('still answers normally after all of that', async () => {
    const body = await postJson<ChatCompletion>('/v1/chat/completions', chat({ temperature: 0 }));
    expect(body.choices[0].message.content).toEqual(expect.any(String));
  });
});

describe('overload', () => {
  it('answers 429 when a shard queue is past MAX_QUEUE, and recovers', async () => {
    // 100 requests at once on one shard, 16 at a time in the batch: the queue passes 64.
    const request = { prompt: 'Overload me', max_tokens: 40, ignore_eos: true, temperature: 0 };
    const statuses = await Promise.all(
      Array.from({ length: 100 }, async () => {
        const res = await post('/v1/completions', request);
        await res.text();
        return res.status;
      }),
    );
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(64);
    expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
    await postJson('/v1/completions', request);
  });
});

describe('auth', () => {
  const withKeys = { ...env, API_KEYS: 'key-one, key-two' };
  const fetchApp = (path: string, headers: Record<string, string> = {}, vars = withKeys) =>
    app.fetch(new Request(`http://x${path}`, { headers }), vars);

  it('with API_KEYS set, requires one of them as a bearer token', async () => {
    await expectError(await fetchApp('/v1/models'), 401, null, 'missing_api_key');
    await expectError(await fetchApp('/v1/models', { authorization: 'Bearer nope' }), 401, null, 'invalid_api_key');
    await expectError(await fetchApp('/v1/models', { authorization: 'Basic key-one' }), 401, null, 'missing_api_key');
    await expectError(await fetchApp('/metrics'), 401);
    expect((await fetchApp('/v1/models', { authorization: 'Bearer key-one' })).status).toBe(200);
    expect((await fetchApp('/v1/models', { authorization: 'bearer key-two' })).status).toBe(200);
    const res = await app.fetch(
      new Request('http://x/v1/completions', {
        method: 'POST',
        headers: { authorization: 'Bearer nope' },
        body: '{"prompt":"Hi"}',
      }),
      withKeys,
    );
    await expectError(res, 401);
  });

  it('with API_KEYS empty (dev mode), accepts every request', async () => {
    expect((await fetchApp('/v1/models', {}, { ...env, API_KEYS: '' })).status).toBe(200);
    expect(
      (await fetchApp('/v1/models', { authorization: 'Bearer anything' }, { ...env, API_KEYS: ' , ' })).status,
    ).toBe(200);
  });
});

/// <reference types="@cloudflare/vitest-pool-workers/types" />
// Inside workerd: the playground page at `/` (bundled as text), the pool endpoint GET /v1/pool/{shard}
// behind the key, and session messages with logprobs, which the page tints its tokens by.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import app from '../../src/worker/app.js';
import { call, expectError, post, postJson, readSse } from './service-helpers.js';
import type { ChatChunk } from './openai-wire.js';

interface Pool {
  object: string;
  shard: number;
  loaded: boolean;
  total: number;
  used: number;
  states: string;
  refs: number[];
  sequences: { key: string; state: string; tokens: number; blocks: number[] }[];
  maxBatchSize: number;
  steps: { step: number; batch: number; tokens: number }[];
}

describe('the playground page', () => {
  it('is served at / as HTML with a strict content security policy, saying whether a key is needed', async () => {
    const res = await call('/');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.headers.get('content-security-policy')).toContain("connect-src 'self'");
    const html = await res.text();
    expect(html).toContain('<title>edge-infer playground</title>');
    expect(html).toContain('<meta name="edge-infer-auth" content="none">');
    const keyed = await app.fetch(new Request('http://x/'), { ...env, API_KEYS: 'k1' });
    expect(await keyed.text()).toContain('<meta name="edge-infer-auth" content="required">');
  });

  it('leaves model files unreachable as public URLs', async () => {
    await expectError(await call('/tiny/config.json'), 404, null, 'not_found');
    await expectError(await call('/tiny/onnx/model.onnx'), 404, null, 'not_found');
  });
});

describe('GET /v1/pool/{shard}', () => {
  it('refuses unknown shards and callers without the key', async () => {
    await expectError(await call('/v1/pool/99'), 404, 'shard', 'not_found');
    await expectError(await call('/v1/pool/abc'), 404, 'shard', 'not_found');
    await expectError(
      await app.fetch(new Request('http://x/v1/pool/0'), { ...env, API_KEYS: 'k1' }),
      401,
      null,
      'missing_api_key',
    );
    const ok = await app.fetch(new Request('http://x/v1/pool/0', { headers: { authorization: 'Bearer k1' } }), {
      ...env,
      API_KEYS: 'k1',
    });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as Pool).object).toBe('kv_pool');
  });

  it("shows a session's kept blocks under its shortened id, and the steps that computed them", async () => {
    const session = await postJson<{ id: string }>(
      '/v1/sessions',
      { system: `Pool picture test ${Date.now()}: a system prompt long enough to fill a block or two of tokens.` },
      201,
    );
    await postJson(`/v1/sessions/${session.id}/messages`, { content: 'Hello', max_tokens: 4, temperature: 0 });
    const shard = Number(session.id.split('.')[0]);
    const res = await call(`/v1/pool/${shard}`);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const pool = (await res.json()) as Pool;
    expect(pool).toMatchObject({ object: 'kv_pool', shard, loaded: true });
    const shown = session.id.slice(0, session.id.indexOf('.') + 7);
    const mine = pool.sequences.find((s) => s.key === shown);
    expect(mine, JSON.stringify(pool.sequences)).toBeDefined();
    // Never the whole id: that is what lets a caller read the transcript.
    expect(pool.sequences.some((s) => s.key === session.id)).toBe(false);
    const view = (await (await call(`/v1/sessions/${session.id}`)).json()) as { tokens: number; cached_tokens: number };
    expect(mine!.state).toBe('kept');
    expect(mine!.tokens).toBe(view.cached_tokens);
    expect(mine!.tokens).toBeGreaterThan(0);
    expect(mine!.blocks.length).toBe(Math.ceil(mine!.tokens / 16));
    for (const b of mine!.blocks) expect(pool.refs[b]).toBeGreaterThan(0);
    expect(pool.states.length).toBe(pool.total);
    expect(pool.steps.length).toBeGreaterThan(0);
    expect(pool.steps.every((s) => s.batch >= 1 && s.batch <= pool.maxBatchSize)).toBe(true);
  });
});

describe('session messages with logprobs', () => {
  const create = async () =>
    (await postJson<{ id: string }>('/v1/sessions', { system: `logprobs ${Date.now()} ${Math.random()}` }, 201)).id;

  it('reports chat logprobs with top alternatives, streamed and not', async () => {
    const id = await create();
    const reply = await postJson<{
      logprobs: { content: { token: string; logprob: number; top_logprobs: unknown[] }[] };
      usage: { completion_tokens: number };
    }>(`/v1/sessions/${id}/messages`, {
      content: 'Hi',
      max_tokens: 5,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
    });
    expect(reply.logprobs.content.length).toBe(reply.usage.completion_tokens);
    for (const lp of reply.logprobs.content) {
      expect(lp.logprob).toBeLessThanOrEqual(0);
      expect(lp.top_logprobs.length).toBe(3);
    }
    const { events, done } = await readSse<ChatChunk>(
      await post(`/v1/sessions/${id}/messages`, {
        content: 'Again',
        max_tokens: 4,
        stream: true,
        logprobs: true,
        top_logprobs: 2,
      }),
    );
    expect(done).toBe(true);
    const withLogprobs = events.filter((e) => e.choices[0]?.logprobs?.content?.length === 1);
    expect(withLogprobs.length).toBeGreaterThan(0);
    expect(withLogprobs[0].choices[0].logprobs!.content[0].top_logprobs.length).toBe(2);
  });

  it('without logprobs the reply has none; bad logprobs fields are OpenAI-schema 400s', async () => {
    const id = await create();
    const plain = await postJson<Record<string, unknown>>(`/v1/sessions/${id}/messages`, {
      content: 'Hi',
      max_tokens: 2,
    });
    expect(plain).not.toHaveProperty('logprobs');
    await expectError(
      await post(`/v1/sessions/${id}/messages`, { content: 'Hi', top_logprobs: 2 }),
      400,
      'top_logprobs',
      'invalid_value',
    );
    await expectError(await post(`/v1/sessions/${id}/messages`, { content: 'Hi', logprobs: 'yes' }), 400, 'logprobs');
    await expectError(
      await post(`/v1/sessions/${id}/messages`, { content: 'Hi', logprobs: true, top_logprobs: 50 }),
      400,
      'top_logprobs',
    );
    // A property of one reply, not a session default.
    await expectError(
      await post('/v1/sessions', { defaults: { logprobs: true } }),
      400,
      'defaults.logprobs',
      'unknown_parameter',
    );
  });
});

/// <reference types="@cloudflare/vitest-pool-workers/types" />
// Chat sessions end to end inside workerd: worker → InferenceObject → engine. Each turn continues the
// session's KV cache (only the new message is prefilled), one turn at a time, DELETE frees the cache,
// and a restarted object restores the session's KV blocks from storage.
import { abortAllDurableObjects, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { EngineStats } from '../../src/engine/engine-stats.js';
import type { InferenceObject } from '../../src/objects/inference-object.js';
import { call, expectError, post, postJson, readSse } from './service-helpers.js';
import type { ChatChunk, Session, Usage } from './openai-wire.js';

const greedy = { temperature: 0, max_tokens: 6 };
let unique = 0;
const system = () => `You are test assistant number ${++unique} of ${Date.now()}.`;

async function createSession(body: Record<string, unknown> = {}): Promise<string> {
  const session = await postJson<Session>('/v1/sessions', { system: system(), defaults: greedy, ...body }, 201);
  return session.id;
}

const say = (id: string, content: string, extra: Record<string, unknown> = {}) =>
  postJson<{ message: { role: string; content: string }; usage: Usage; finish_reason: string }>(
    `/v1/sessions/${id}/messages`,
    { content, ...extra },
  );

const getSession = async (id: string) => {
  const res = await call(`/v1/sessions/${id}`);
  expect(res.status).toBe(200);
  return (await res.json()) as {
    messages: { role: string; content: string }[];
    tokens: number;
    cached_tokens: number;
    stored_tokens: number;
    system: string;
  };
};

function shardOf(id: string): DurableObjectStub<InferenceObject> {
  const ns = (env as unknown as Cloudflare.Env).INFERENCE;
  return ns.get(ns.idFromName(`shard-${id.split('.')[0]}`));
}

const engineStats = (id: string): Promise<EngineStats> =>
  runInDurableObject(shardOf(id), (instance) =>
    (instance as unknown as { loaded: { stats(): EngineStats } }).loaded.stats(),
  );

describe('sessions', () => {
  it('creates, shows and deletes a session', async () => {
    const created = await postJson<Session>(
      '/v1/sessions',
      { system: 'Be brief.', model: 'tiny', defaults: { temperature: 0.5, top_k: 5 } },
      201,
    );
    expect(created).toMatchObject({
      id: expect.stringMatching(/^\d+\.[0-9a-f]+$/),
      object: 'session',
      model: 'tiny',
      system: 'Be brief.',
      defaults: { temperature: 0.5, top_k: 5 },
      messages: [{ role: 'system', content: 'Be brief.' }],
      tokens: 0,
      cached_tokens: 0,
      stored_tokens: 0,
    });
    const res = await call(`/v1/sessions/${created.id}`, { method: 'DELETE' });
    expect(await res.json()).toEqual({ id: created.id, object: 'session', deleted: true });
    await expectError(await call(`/v1/sessions/${created.id}`), 404, null, 'session_not_found');
    await expectError(await call(`/v1/sessions/${created.id}`, { method: 'DELETE' }), 404, null, 'session_not_found');
    await expectError(await call('/v1/sessions/not-an-id'), 404, null, 'session_not_found');
  });

  it('refuses bad bodies with 400s naming the field', async () => {
    await expectError(await post('/v1/sessions', { system: 3 }), 400, 'system');
    await expectError(await post('/v1/sessions', { defaults: { temperature: 'hot' } }), 400, 'defaults.temperature');
    // Values are checked at creation too, not only at the first message.
    await expectError(await post('/v1/sessions', { defaults: { temperature: 5 } }), 400, 'defaults.temperature');
    await expectError(
      await post('/v1/sessions', { defaults: { tempreature: 1 } }),
      400,
      'defaults.tempreature',
      'unknown_parameter',
    );
    await expectError(await post('/v1/sessions', { model: 'gpt-9' }), 404, 'model', 'model_not_found');
    const id = await createSession();
    await expectError(await post(`/v1/sessions/${id}/messages`, {}), 400, 'content');
    await expectError(await post(`/v1/sessions/${id}/messages`, { content: 'hi', top_p: 7 }), 400, 'top_p');
    await expectError(
      await post(`/v1/sessions/${id}/messages`, { content: 'hi', messages: [] }),
      400,
      'messages',
      'unknown_parameter',
    );
  });

  it('five turns: each prefills only the new message and the end of the last reply', async () => {
    const id = await createSession();
    const turns: Usage[] = [];
    for (let turn = 1; turn <= 5; turn++) {
      const reply = await say(id, `This is message ${turn}. Please answer.`);
      expect(reply.message.role).toBe('assistant');
      expect(reply.usage.total_tokens).toBe(reply.usage.prompt_tokens + reply.usage.completion_tokens);
      turns.push(reply.usage);
    }
    expect(turns[0].prompt_tokens_details.cached_tokens).toBe(0);
    for (let n = 1; n < 5; n++) {
      const prev = turns[n - 1];
      const cur = turns[n];
      const previousLog = prev.prompt_tokens + prev.completion_tokens;
      // The engine holds every token it computed: all of the previous log but the last sampled token.
      expect(cur.prompt_tokens_details.cached_tokens).toBe(previousLog - 1);
      const newTurnTokens = cur.prompt_tokens - previousLog;
      expect(newTurnTokens).toBeGreaterThan(5);
      expect(newTurnTokens).toBeLessThan(80);
      expect(cur.prompt_tokens - cur.prompt_tokens_details.cached_tokens).toBe(newTurnTokens + 1);
    }
    const session = await getSession(id);
    expect(session.messages.map((m) => m.role)).toEqual(['system', ...Array(5).fill(['user', 'assistant']).flat()]);
    expect(session.messages[9].content).toBe(`This is message 5. Please answer.`);
    const last = turns[4];
    expect(session.tokens).toBeGreaterThanOrEqual(last.prompt_tokens + last.completion_tokens);
    expect(session.tokens).toBeLessThanOrEqual(last.prompt_tokens + last.completion_tokens + 2);
    expect(session.cached_tokens).toBe(last.prompt_tokens + last.completion_tokens - 1);
  });

  it('streams a turn in chat.completion.chunk framing, and records it', async () => {
    const id = await createSession();
    const { events, done } = await readSse<ChatChunk>(
      await post(`/v1/sessions/${id}/messages`, {
        content: 'Stream please',
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    expect(done).toBe(true);
    expect(events.every((e) => e.object === 'chat.completion.chunk')).toBe(true);
    expect(events[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(events.at(-2)!.choices[0].finish_reason).toMatch(/^(stop|length)$/);
    const usage = events.at(-1)!.usage as Usage;
    expect(usage.completion_tokens).toBeGreaterThan(0);
    const text = events
      .slice(1, -2)
      .map((e) => e.choices[0].delta.content)
      .join('');
    const session = await getSession(id);
    expect(session.messages.slice(1)).toEqual([
      { role: 'user', content: 'Stream please' },
      { role: 'assistant', content: text },
    ]);
    // The next turn continues the cache the streamed turn left.
    const next = await say(id, 'And again');
    expect(next.usage.prompt_tokens_details.cached_tokens).toBe(usage.prompt_tokens + usage.completion_tokens - 1);
  });

  it('answers 409 to a second message while the first is being answered', async () => {
    const id = await createSession();
    const first = await post(`/v1/sessions/${id}/messages`, {
      content: 'A long answer please',
      stream: true,
      max_tokens: 400,
      ignore_eos: true,
    });
    expect(first.status).toBe(200);
    await expectError(await post(`/v1/sessions/${id}/messages`, { content: 'Me too' }), 409, null, 'session_busy');
    const { done } = await readSse(first);
    expect(done).toBe(true);
    const after = await say(id, 'Now my turn');
    expect(after.message.content).toEqual(expect.any(String));
    expect((await getSession(id)).messages).toHaveLength(5);
  });

  it('DELETE during a turn cancels it: the stream ends early with an error, nothing stays cached', async () => {
    const id = await createSession();
    await say(id, 'First');
    const pinnedBefore = (await engineStats(id)).pinnedSessions;
    const res = await post(`/v1/sessions/${id}/messages`, {
      content: 'Interrupted',
      stream: true,
      max_tokens: 1500,
      ignore_eos: true,
    });
    const reader = res.body!.getReader();
    for (let i = 0; i < 3; i++) expect((await reader.read()).done).toBe(false);
    expect((await call(`/v1/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);
    let rest = '';
    const decoder = new TextDecoder();
    for (let r = await reader.read(); !r.done; r = await reader.read())
      rest += decoder.decode(r.value, { stream: true });
    expect(rest).toContain('"error"');
    expect(rest).not.toContain('[DONE]');
    expect(rest.split('chat.completion.chunk').length).toBeLessThan(1500);
    const stats = await engineStats(id);
    expect(stats.running).toBe(0);
    expect(stats.pinnedSessions).toBe(pinnedBefore - 1);
  });

  it('DELETE frees the session cache in the engine', async () => {
    const id = await createSession();
    await say(id, 'Remember me');
    const pinned = (await engineStats(id)).pinnedSessions;
    expect(pinned).toBeGreaterThanOrEqual(1);
    const usedBefore = (await engineStats(id)).kv.used;
    expect((await call(`/v1/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);
    const stats = await engineStats(id);
    expect(stats.pinnedSessions).toBe(pinned - 1);
    expect(stats.kv.used).toBeLessThan(usedBefore);
    await expectError(
      await post(`/v1/sessions/${id}/messages`, { content: 'still there?' }),
      404,
      null,
      'session_not_found',
    );
  });

  it('survives its object restarting: the transcript is kept and the stored KV blocks are restored, not recomputed', async () => {
    const id = await createSession();
    const one = await say(id, 'Turn one');
    const two = await say(id, 'Turn two');
    const before = await getSession(id);
    // What turn two computed (its prompt and reply, less the last sampled token): its full blocks and its
    // partial last block.
    const computed = two.usage.prompt_tokens + two.usage.completion_tokens - 1;
    const storedBlocks = Math.ceil(computed / 16);
    expect(before.stored_tokens).toBe(computed);

    await abortAllDurableObjects();
    const after = await getSession(id);
    expect(after.messages).toEqual(before.messages);
    expect(after.tokens).toBe(before.tokens);
    expect(after.cached_tokens).toBe(0);
    expect(after.stored_tokens).toBe(before.stored_tokens);

    const three = await say(id, 'Turn three');
    // A fresh engine restores the stored blocks; only the last sampled token and the new message are prefilled.
    expect(three.usage.prompt_tokens_details.cached_tokens).toBe(before.stored_tokens);
    expect((await engineStats(id)).kvStore?.restored.blocks).toBe(storedBlocks);
    const previousLog = two.usage.prompt_tokens + two.usage.completion_tokens;
    expect(three.usage.prompt_tokens - previousLog).toBeGreaterThan(5);
    expect(three.usage.prompt_tokens - previousLog).toBeLessThan(80);
    expect(one.usage.prompt_tokens).toBeLessThan(two.usage.prompt_tokens);
    const four = await say(id, 'Turn four');
    expect(four.usage.prompt_tokens_details.cached_tokens).toBe(
      three.usage.prompt_tokens + three.usage.completion_tokens - 1,
    );
    expect((await getSession(id)).messages).toHaveLength(1 + 8);
  });
});

// Sessions end to end over real HTTP against `wrangler dev`: five turns where each prefills only what is
// new, streaming with a real SSE parser, one turn at a time, and a server restart with nothing lost
// (test/e2e/durable-kv.test.ts has the restore's own tests).
import { createParser } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

let server: DevServer;
beforeAll(async () => {
  server = await startDevServer();
});
afterAll(() => server?.stop());

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}
interface Reply {
  message: { role: string; content: string };
  usage: Usage;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<{ status: number; json: T }> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as T };
}

const say = (id: string, content: string, extra: Record<string, unknown> = {}) =>
  call<Reply>('POST', `/v1/sessions/${id}/messages`, { content, max_tokens: 12, temperature: 0, ...extra });

describe('sessions', () => {
  let id: string;
  const turns: Reply[] = [];

  it('five turns: each prefills only the new message (plus template tokens)', async () => {
    const created = await call<{ id: string; messages: unknown[] }>('POST', '/v1/sessions', {
      system: 'You are terse.',
    });
    expect(created.status).toBe(201);
    id = created.json.id;
    const contents = ['Hello!', 'What is a token?', 'And a block?', 'Why cache them?', 'Thanks, bye.'];
    for (const content of contents) {
      const { status, json } = await say(id, content);
      expect(status).toBe(200);
      expect(json.message.role).toBe('assistant');
      turns.push(json);
    }
    for (let t = 1; t < 5; t++) {
      const previous = turns[t - 1].usage;
      const { usage } = turns[t];
      // Everything the previous turn computed comes from the cache: its prompt and its reply, less the
      // last sampled token (never fed back).
      expect(usage.prompt_tokens_details.cached_tokens, `turn ${t + 1}`).toBe(
        previous.prompt_tokens + previous.completion_tokens - 1,
      );
      // What is prefilled: the last sampled token, the previous reply's closing `<|im_end|>\n` when it ended
      // by length, and the new segment `<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n`:
      // at most 22 tokens besides the content's (at most one per byte), never the history before it.
      const prefilled = usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens;
      expect(prefilled, `turn ${t + 1} prefills only the new user segment`).toBeLessThanOrEqual(
        new TextEncoder().encode(contents[t]).length + 22,
      );
      expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(prefilled);
    }
    const view = await call<{ messages: { role: string; content: string }[]; tokens: number }>(
      'GET',
      `/v1/sessions/${id}`,
    );
    expect(view.json.messages.map((m) => m.role)).toEqual(['system', ...Array(5).fill(['user', 'assistant']).flat()]);
    expect(view.json.messages.at(-1)!.content).toBe(turns[4].message.content);
  });

  it('a streamed turn uses chat completion chunk framing', async () => {
    const res = await fetch(`${server.url}/v1/sessions/${id}/messages`, {
      method: 'POST',
      body: JSON.stringify({
        content: 'One more?',
        max_tokens: 8,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const data: string[] = [];
    const parser = createParser({ onEvent: (e) => data.push(e.data) });
    const decoder = new TextDecoder();
    const reader = res.body!.getReader();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
      parser.feed(decoder.decode(chunk.value, { stream: true }));
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks.at(-1).usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
  });

  it('two messages at once never interleave: the second is 409', async () => {
    const long = say(id, 'Tell me everything.', { max_tokens: 1000, ignore_eos: true });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const second = await say(id, 'Me too!');
    expect(second.status).toBe(409);
    expect((second.json as unknown as { error: { code: string } }).error.code).toBe('session_busy');
    expect((await long).status).toBe(200);
  });

  it('a restart of the server loses nothing: the transcript is in storage, the cache is restored from there', async () => {
    const before = await call<{ messages: unknown[]; tokens: number; stored_tokens: number }>(
      'GET',
      `/v1/sessions/${id}`,
    );
    expect(before.json.stored_tokens).toBeGreaterThan(0);
    await server.stop();
    server = await startDevServer({}, server.persistDir);
    const after = await call<{ messages: unknown[]; tokens: number; cached_tokens: number }>(
      'GET',
      `/v1/sessions/${id}`,
    );
    expect(after.status).toBe(200);
    expect(after.json.messages).toEqual(before.json.messages);
    expect(after.json.tokens).toBe(before.json.tokens);
    const next = await say(id, 'Still there?');
    expect(next.status).toBe(200);
    expect(next.json.usage.prompt_tokens).toBeGreaterThan(before.json.tokens);
    // A fresh object: its pool is empty, and the stored blocks (full ones and the partial last one) are
    // restored instead of prefilled. (At least what was stored when we looked: the last reply's blocks may
    // still have been being written.)
    expect(next.json.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(before.json.stored_tokens);
    expect(next.json.usage.prompt_tokens_details.cached_tokens).toBeLessThanOrEqual(before.json.tokens);
    const again = await say(id, 'Good.');
    expect(again.json.usage.prompt_tokens_details.cached_tokens).toBe(
      next.json.usage.prompt_tokens + next.json.usage.completion_tokens - 1,
    );
  });

  it('DELETE frees the session; then it is 404', async () => {
    expect((await call('DELETE', `/v1/sessions/${id}`)).status).toBe(200);
    expect((await call('GET', `/v1/sessions/${id}`)).status).toBe(404);
    expect((await say(id, 'Hello?')).status).toBe(404);
  });

  it('a reply cut by a stop string is recorded as the text the user saw, and the session goes on', async () => {
    const open = async (): Promise<string> =>
      (await call<{ id: string }>('POST', '/v1/sessions', { system: 'Be brief.' })).json.id;
    const full = await say(await open(), 'Describe the sea.', { max_tokens: 24 });
    const text = full.json.message.content;
    const stop = text.slice(8, 11);
    const id = await open();
    const cut = await say(id, 'Describe the sea.', { max_tokens: 24, stop: [stop] });
    expect(cut.json.message.content).toBe(text.slice(0, text.indexOf(stop)));
    const view = await call<{ messages: { content: string }[] }>('GET', `/v1/sessions/${id}`);
    expect(view.json.messages.at(-1)!.content).toBe(cut.json.message.content);
    const next = await say(id, 'And the sky?');
    expect(next.status).toBe(200);
    expect(next.json.usage.prompt_tokens_details.cached_tokens).toBeLessThan(next.json.usage.prompt_tokens);
  });

  it('bad input: no content, wrong types, unknown session', async () => {
    const created = await call<{ id: string }>('POST', '/v1/sessions', {});
    expect((await call('POST', `/v1/sessions/${created.json.id}/messages`, {})).status).toBe(400);
    expect((await call('POST', `/v1/sessions/${created.json.id}/messages`, { content: 5 })).status).toBe(400);
    expect(
      (await call('POST', `/v1/sessions/${created.json.id}/messages`, { content: 'hi', temperature: 'hot' })).status,
    ).toBe(400);
    expect((await call('POST', '/v1/sessions', { system: 42 })).status).toBe(400);
    expect((await call('GET', '/v1/sessions/0.nothing')).status).toBe(404);
    expect((await say(created.json.id, 'still works')).status).toBe(200);
  });
});

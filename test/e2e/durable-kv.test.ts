// Durable session KV over real HTTP against `wrangler dev`: a session's KV blocks (full ones and its partial
// last one) are written to its object's SQLite after each turn, and after a kill -9 and restart, or after the object is evicted for
// being idle, the next turn restores them instead of prefilling: the same text as a server that never
// stopped, with the stored history counted as cached. And a small KV_STORE_MB holds through 50 sessions.
import { afterAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const servers: DevServer[] = [];
afterAll(() => Promise.all(servers.map((s) => s.stop())));

async function start(vars: Record<string, string> = {}, persistDir?: string): Promise<DevServer> {
  const server = await startDevServer(vars, persistDir);
  servers.push(server);
  return server;
}

interface Reply {
  message: { content: string };
  usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details: { cached_tokens: number } };
}
interface SessionView {
  tokens: number;
  cached_tokens: number;
  stored_tokens: number;
}

async function call<T>(server: DevServer, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await res.json()) as T;
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

const BLOCK = 16;
const openSession = (server: DevServer, system: string) =>
  call<{ id: string }>(server, 'POST', '/v1/sessions', { system }).then((s) => s.id);
const say = (server: DevServer, id: string, content: string) =>
  call<Reply>(server, 'POST', `/v1/sessions/${id}/messages`, { content, max_tokens: 12, temperature: 0 });
const view = (server: DevServer, id: string) => call<SessionView>(server, 'GET', `/v1/sessions/${id}`);
/** What a turn computed, its full blocks and its partial last one: its prompt and reply, less the last sampled token (never fed back). */
const storedAfter = (r: Reply): number => r.usage.prompt_tokens + r.usage.completion_tokens - 1;
/** The full blocks of it (a session whose last block is partial: the store holds that one too). */
const fullBlocksOf = (tokens: number): number => Math.floor(tokens / BLOCK) * BLOCK;

/** Polls until the session's blocks are in storage (they are written just after the reply is sent). */
async function waitStored(server: DevServer, id: string, tokens: number): Promise<SessionView> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const v = await view(server, id);
    if (v.stored_tokens >= tokens || Date.now() > deadline) return v;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A shard's value of a metric family in GET /metrics. */
async function metric(server: DevServer, name: string, shard: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`shard="${shard}"`));
  if (!line) throw new Error(`no ${name} for shard ${shard}`);
  return Number(line.split(' ').at(-1));
}

const TURNS = [
  'Hello!',
  'What is a token?',
  'And a block?',
  'Why cache them?',
  'Thanks.',
  'One more thing.',
  'Bye now.',
];
const SYSTEM = 'You are terse.';

describe('durable session KV', () => {
  it('survives kill -9 and an idle eviction: the next turn restores the stored history and says what a never-stopped server says', async () => {
    // The reference: a server that is never stopped, the whole conversation held in its pool.
    const reference = await start({ KV_STORE_MB: '0' });
    const refId = await openSession(reference, SYSTEM);
    const expected: string[] = [];
    const expectedCached: number[] = [];
    for (const content of TURNS) {
      const reply = await say(reference, refId, content);
      expected.push(reply.message.content);
      expectedCached.push(reply.usage.prompt_tokens_details.cached_tokens);
    }
    await reference.stop();

    let server = await start();
    const id = await openSession(server, SYSTEM);
    let last: Reply | undefined;
    for (const content of TURNS.slice(0, 5)) {
      last = await say(server, id, content);
      expect(last.message.content).toBe(expected[TURNS.indexOf(content)]);
    }
    const stored = storedAfter(last!);
    expect((await waitStored(server, id, stored)).stored_tokens).toBe(stored);

    await server.kill();
    server = await start({}, server.persistDir);
    const afterRestart = await view(server, id);
    expect(afterRestart.cached_tokens).toBe(0); // a new object: its engine has not even loaded
    expect(afterRestart.stored_tokens).toBe(stored);
    const sixth = await say(server, id, TURNS[5]);
    // Restored: every stored full block, and the partial last one wherever the new prompt continues it, as
    // the never-stopped server's pool gives.
    expect(sixth.usage.prompt_tokens_details.cached_tokens).toBe(expectedCached[5]);
    expect(sixth.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(fullBlocksOf(stored));
    expect(sixth.message.content).toBe(expected[5]);

    // Idle: no request reaches the object until wrangler dev has evicted it (it does after ~10-20 s).
    const storedSix = storedAfter(sixth);
    expect((await waitStored(server, id, storedSix)).stored_tokens).toBe(storedSix);
    const shard = id.split('.')[0];
    await new Promise((resolve) => setTimeout(resolve, 35_000));
    expect(await metric(server, 'edge_infer_engine_loaded', shard)).toBe(0);
    const seventh = await say(server, id, TURNS[6]);
    expect(seventh.usage.prompt_tokens_details.cached_tokens).toBe(expectedCached[6]);
    expect(seventh.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(fullBlocksOf(storedSix));
    expect(seventh.message.content).toBe(expected[6]);
    expect(await metric(server, 'edge_infer_kv_restored_tokens_total', shard)).toBe(
      seventh.usage.prompt_tokens_details.cached_tokens,
    );
  }, 180_000);

  it('a small KV_STORE_MB holds through 50 sessions, and the oldest sessions go first', async () => {
    const server = await start({ KV_STORE_MB: '1' });
    const budget = 2 ** 20;
    const sessions: { id: string; full: number }[] = [];
    for (let i = 0; i < 50; i++) {
      // The number first, so that no two sessions share a block (shared blocks stay while anyone needs them).
      const id = await openSession(
        server,
        `${i}: you are an assistant. ${'Answer in one short line, exact and plain, without lists. '.repeat(3)}`,
      );
      await say(server, id, `Hello, number ${i}.`);
      const second = await say(server, id, 'Tell me more.');
      sessions.push({ id, full: storedAfter(second) });
      await waitStored(server, id, storedAfter(second));
      for (const shard of ['0', '1'])
        expect(await metric(server, 'edge_infer_kv_store_bytes', shard)).toBeLessThanOrEqual(budget);
    }
    const views = await Promise.all(
      sessions.map(async (s) => ({
        ...s,
        shard: s.id.split('.')[0],
        stored: (await view(server, s.id)).stored_tokens,
      })),
    );
    for (const shard of ['0', '1']) {
      const mine = views.filter((v) => v.shard === shard);
      // Oldest first: the fraction of each session's chain still stored never falls from older to newer.
      const kept = mine.map((v) => v.stored / v.full);
      for (let i = 1; i < kept.length; i++)
        expect(kept[i], `${shard}: session ${i} of ${kept.length}`).toBeGreaterThanOrEqual(kept[i - 1]);
      expect(kept.at(-1)).toBe(1);
    }
    expect(views.filter((v) => v.stored === 0).length).toBeGreaterThan(0); // the budget did evict
    expect(views[0].stored).toBe(0);
  }, 240_000);
});

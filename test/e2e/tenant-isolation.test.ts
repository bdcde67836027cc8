// One tenant cannot hurt another, round 2 (issue 44), against `wrangler dev` with two keys on one shard:
// alice attacks, and what bob sees (his cached tokens, his latency, his session) or what is left behind
// (storage, metrics, a transcript) is the judge. Latencies are printed; the loose bounds on bob's requests
// catch the multi-second stalls the attacks caused, an order of magnitude above what they take.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api as call, hookSecret, json } from './helpers/service-client.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEYS = { alice: 'sk-alice-iso', bob: 'sk-bob-iso', carol: 'sk-carol-iso' };
const VARS = {
  API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob},carol:${KEYS.carol}`,
  SHARD_COUNT: '1',
  RATE_LIMITS: JSON.stringify({ carol: { rpm: 3 } }),
  MAX_SESSIONS_PER_KEY: '6',
  MAX_HOOKS_PER_KEY: '2',
  ALLOW_LOOPBACK_CALLBACKS: 'true',
};
/** Far above what bob's 1-token request takes beside any attack here (printed), far below the stalls they caused. */
const STALL_MS = 3_000;

const servers: DevServer[] = [];
let server: DevServer;
beforeAll(async () => {
  server = await startDevServer(VARS);
  servers.push(server);
});
afterAll(() => Promise.all(servers.map((s) => s.stop())));

const api = (key: string, method: string, path: string, body?: unknown) => call(server.url, key, method, path, body);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** bob's 1-token request: its status and how long it took. */
async function oneToken(key = KEYS.bob): Promise<{ status: number; ms: number }> {
  const sent = performance.now();
  const res = await api(key, 'POST', '/v1/completions', { prompt: 'Ping', max_tokens: 1 });
  await res.arrayBuffer();
  return { status: res.status, ms: Math.round(performance.now() - sent) };
}

/** Three of bob's 1-token requests, one after another, while `attack` runs; each must answer 200 in time. */
async function probesDuring(label: string, attack: Promise<unknown>) {
  await sleep(50);
  const probes = [];
  for (let i = 0; i < 3; i++) probes.push(await oneToken());
  await attack;
  console.log(`${label}: bob's 1-token requests took ${probes.map((p) => `${p.ms} ms`).join(', ')}`);
  for (const probe of probes) {
    expect(probe.status).toBe(200);
    expect(probe.ms).toBeLessThan(STALL_MS);
  }
}

interface Usage {
  prompt_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

/** The prompt tokens `key`'s 1-token completion of `prompt` was served from cache. */
async function cachedTokens(key: string, prompt: string): Promise<number> {
  const body = await json<{ usage: Usage }>(
    await api(key, 'POST', '/v1/completions', { prompt, max_tokens: 1, temperature: 0 }),
  );
  return body.usage.prompt_tokens_details?.cached_tokens ?? 0;
}

/** A prompt of many blocks, its words chosen by `seed` so each test's is its own. */
const longPrompt = (seed: string) =>
  Array.from({ length: 40 }, (_, i) => `${seed}${i}`).join(' ') + ' private notes on the merger';

describe('the prefix cache is private to a key (5)', () => {
  it("bob repeating alice's prompt finds none of it cached, in the pool or after a restart in the durable store; alice does", async () => {
    const prompt = longPrompt('acct');
    expect(await cachedTokens(KEYS.alice, prompt)).toBe(0);
    const aliceAgain = await cachedTokens(KEYS.alice, prompt);
    const bob = await cachedTokens(KEYS.bob, prompt);
    console.log(`prefix cache: alice's repeat found ${aliceAgain} cached tokens, bob's copy of it ${bob}`);
    expect(aliceAgain).toBeGreaterThanOrEqual(32);
    expect(bob).toBe(0);
    // A prompt only alice sent (bob's copy above stored blocks of his own). Stored blocks are written just
    // after each reply; a restart empties the pool, the store keeps them.
    const stored = longPrompt('memo');
    expect(await cachedTokens(KEYS.alice, stored)).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await server.stop();
    server = await startDevServer(VARS, server.persistDir);
    servers.push(server);
    const bobStored = await cachedTokens(KEYS.bob, stored);
    const aliceStored = await cachedTokens(KEYS.alice, stored);
    console.log(`after a restart: alice found ${aliceStored} stored tokens, bob ${bobStored}`);
    expect(bobStored).toBe(0);
    expect(aliceStored).toBeGreaterThanOrEqual(32);
  });

  it("the Responses API's prompts are private the same way: bob's copy of alice's input finds none of it cached", async () => {
    const input = longPrompt('resp');
    const cached = async (key: string): Promise<number> => {
      const res = await api(key, 'POST', '/v1/responses', {
        input,
        max_output_tokens: 1,
        temperature: 0,
        store: false,
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { input_tokens_details?: { cached_tokens?: number } } };
      return body.usage.input_tokens_details?.cached_tokens ?? 0;
    };
    expect(await cached(KEYS.alice)).toBe(0);
    const aliceAgain = await cached(KEYS.alice);
    const bob = await cached(KEYS.bob);
    console.log(`responses: alice's repeat found ${aliceAgain} cached tokens, bob's copy of it ${bob}`);
    expect(aliceAgain).toBeGreaterThanOrEqual(32);
    expect(bob).toBe(0);
  });
});

/** A function tool whose description is `size` characters, or with `nested`, as deep in its schema as JSON allows. */
function bigTool(size: number, nested = false) {
  const text = 'lorem ipsum dolor sit amet '.repeat(Math.ceil(size / 27)).slice(0, size);
  let parameters: Record<string, unknown> = { type: 'string', description: nested ? text : 'x' };
  if (nested) for (let i = 0; i < 12; i++) parameters = { type: 'object', properties: { [`p${i}`]: parameters } };
  return { type: 'function', function: { name: 'lookup', description: nested ? 'Look up' : text, parameters } };
}

describe('every request is bounded before it is tokenised (1)', () => {
  it("ten of alice's ~950 KB tools arrays at once are refused without tokenising; bob's requests are answered as alone", async () => {
    await oneToken(); // the model is loaded
    const alone = await oneToken();
    const sent = performance.now();
    const attack = Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        api(KEYS.alice, 'POST', '/v1/chat/completions', {
          messages: [{ role: 'user', content: 'Hi' }],
          tools: [bigTool(950_000, i % 2 === 1)],
          max_tokens: 1,
        }).then(async (res) => {
          const body = await json<{ error: { code: string; param: string } }>(res, 400);
          return { ...body.error, ms: Math.round(performance.now() - sent) };
        }),
      ),
    );
    await probesDuring(`ten 950 KB tools arrays (bob alone: ${alone.ms} ms)`, attack);
    const refused = await attack;
    console.log(`alice's refusals came back after ${refused.map((r) => r.ms).join(', ')} ms`);
    for (const error of refused) expect(error).toMatchObject({ code: 'context_length_exceeded', param: 'tools' });
    const health = await (await api(KEYS.bob, 'GET', '/metrics')).text();
    expect(health).toMatch(/edge_infer_engine_loaded\{[^}]*\} 1/);
  });

  it("ten of alice's batches of 64 prompts (~1 MB each) at once leave bob's requests answered as alone", async () => {
    const prompt = 'lorem ipsum dolor sit amet '.repeat(560); // ~15 KB: under one prompt's bound, past the window
    const sent = performance.now();
    const attack = Promise.all(
      Array.from({ length: 10 }, () =>
        api(KEYS.alice, 'POST', '/v1/completions', { prompt: Array(64).fill(prompt), max_tokens: 1 }).then(
          async (res) => {
            const body = (await res.json()) as { error?: { code: string } };
            return { status: res.status, code: body.error?.code, ms: Math.round(performance.now() - sent) };
          },
        ),
      ),
    );
    await probesDuring('ten batches of 64 x 15 KB prompts', attack);
    const refused = await attack;
    console.log(`alice's batch refusals: ${refused.map((r) => `${r.status} after ${r.ms} ms`).join(', ')}`);
    // Each batch is refused before anything of it is generated: for its length once tokenised, or, while one of
    // bob's probes waits, at the queue (64 sequences are past alice's share of 32) before it is tokenised.
    for (const r of refused)
      expect([r.status, r.code]).toSatisfy(
        ([status, code]: [number, string | undefined]) =>
          (status === 400 && code === 'context_length_exceeded') || (status === 429 && code === 'queue_share_exceeded'),
      );
  });

  it("refused requests count against a key's rate limit like any other", async () => {
    const statuses = [];
    for (let i = 0; i < 5; i++) {
      const res = await api(KEYS.carol, 'POST', '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'Hi' }],
        tools: [bigTool(200_000)],
      });
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    expect(statuses).toEqual([400, 400, 400, 429, 429]);
    expect((await oneToken()).status).toBe(200);
  });
});

/** `key`'s sample of a per-key gauge on shard 0 (0 when the shard reports none for it). */
async function keyGauge(name: string, key: string): Promise<number> {
  const text = await (await api(KEYS.bob, 'GET', '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`key="${key}"`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe("a key's storage is bounded (4)", () => {
  it("a 1 MB system prompt is refused at creation; alice's sessions and hooks stop at their caps, bob's do not", async () => {
    const bytesBefore = await keyGauge('edge_infer_key_stored_session_bytes', 'alice');
    const huge = await api(KEYS.alice, 'POST', '/v1/sessions', { system: 'x'.repeat(1_000_000) });
    expect((await json<{ error: { code: string; param: string } }>(huge, 400)).error).toMatchObject({
      code: 'string_above_max_length',
      param: 'system',
    });
    expect(await keyGauge('edge_infer_key_stored_session_bytes', 'alice')).toBe(bytesBefore);

    const made: string[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await api(KEYS.alice, 'POST', '/v1/sessions', { system: `Notes ${i}` });
      made.push((await json<{ id: string }>(res, 201)).id);
    }
    const over = await api(KEYS.alice, 'POST', '/v1/sessions', { system: 'One more' });
    expect((await json<{ error: { code: string } }>(over, 429)).error.code).toBe('storage_quota_exceeded');
    expect(await keyGauge('edge_infer_key_stored_sessions', 'alice')).toBe(6);
    const bobs = await json<{ id: string }>(await api(KEYS.bob, 'POST', '/v1/sessions', { system: 'Mine' }), 201);
    await json(await api(KEYS.bob, 'DELETE', `/v1/sessions/${bobs.id}`));
    // Deleting one makes room for one.
    await json(await api(KEYS.alice, 'DELETE', `/v1/sessions/${made[0]}`));
    await json(await api(KEYS.alice, 'POST', '/v1/sessions', { system: 'Again' }), 201);

    const hook = (key: string, name: string) =>
      api(key, 'PUT', `/v1/hooks/${name}`, {
        template: 'Say {{ text }}',
        callback_url: 'http://127.0.0.1:9/deliver',
        secret: hookSecret(),
        params: { max_tokens: 2 },
      });
    for (const name of ['one', 'two']) await json(await hook(KEYS.alice, name), 201);
    expect((await json<{ error: { code: string } }>(await hook(KEYS.alice, 'three'), 429)).error.code).toBe(
      'storage_quota_exceeded',
    );
    await json(await hook(KEYS.alice, 'two'), 200); // replacing one of its own is not another
    await json(await hook(KEYS.bob, 'three'), 201);
    expect(await keyGauge('edge_infer_key_hooks', 'alice')).toBe(2);
    expect(await keyGauge('edge_infer_key_hooks', 'bob')).toBe(1);
  });
});

// One tenant cannot hurt another, round 2 (issue 44), against `wrangler dev` with two keys on one shard:
// alice attacks, and what bob sees (his cached tokens, his latency, his session) or what is left behind
// (storage, metrics, a transcript) is the judge. Latencies are printed; the loose bounds on bob's requests
// catch the multi-second stalls the attacks caused, an order of magnitude above what they take.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api as call, json } from './helpers/service-client.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEYS = { alice: 'sk-alice-iso', bob: 'sk-bob-iso' };
const VARS = { API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}`, SHARD_COUNT: '1' };

const servers: DevServer[] = [];
let server: DevServer;
beforeAll(async () => {
  server = await startDevServer(VARS);
  servers.push(server);
});
afterAll(() => Promise.all(servers.map((s) => s.stop())));

const api = (key: string, method: string, path: string, body?: unknown) => call(server.url, key, method, path, body);

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
});

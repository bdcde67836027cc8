// A key's stored responses are capped per shard (MAX_RESPONSES_PER_KEY, here 3): past the cap `store: true` is
// 429 naming the limit, `store: false` still answers, another key is not affected, and deleting one makes room.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEYS = { alice: 'sk-alice-caps', bob: 'sk-bob-caps' };
let server: DevServer;
let alice: OpenAI;
let bob: OpenAI;

beforeAll(async () => {
  server = await startDevServer({
    API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}`,
    SHARD_COUNT: '1',
    MAX_RESPONSES_PER_KEY: '3',
  });
  alice = new OpenAI({ apiKey: KEYS.alice, baseURL: `${server.url}/v1`, maxRetries: 0 });
  bob = new OpenAI({ apiKey: KEYS.bob, baseURL: `${server.url}/v1`, maxRetries: 0 });
});
afterAll(() => server?.stop());

const ask = (client: OpenAI, store = true) =>
  client.responses.create({ model: 'tiny', input: 'Hi.', max_output_tokens: 2, temperature: 0, store });

describe('stored responses per key', () => {
  it('past MAX_RESPONSES_PER_KEY, store: true is 429; store: false, other keys and a delete still work', async () => {
    const kept = [await ask(alice), await ask(alice), await ask(alice)];
    let refused: InstanceType<typeof OpenAI.APIError> | undefined;
    try {
      await ask(alice);
    } catch (err) {
      refused = err as InstanceType<typeof OpenAI.APIError>;
    }
    expect(refused?.status).toBe(429);
    expect(refused?.code).toBe('too_many_stored_responses');
    expect(refused?.message).toContain('MAX_RESPONSES_PER_KEY 3');
    expect((await ask(alice, false)).output.length).toBeGreaterThan(0);
    expect((await ask(bob)).id).toMatch(/^resp_/);
    await alice.responses.delete(kept[0].id);
    expect((await ask(alice)).id).toMatch(/^resp_/);
  });
});

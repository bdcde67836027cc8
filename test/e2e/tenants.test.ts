// Tenants over real HTTP against `wrangler dev` with several keys: a key gets 404 on another's session,
// job and hook; two keys both have a hook named `summarise`, each receiving only its own events (a real
// receiver verifies them); a limited key gets 429 with OpenAI's x-ratelimit-* headers; a burst of 48 from
// one key leaves another's requests on the same shard served after at most the requests already running;
// and rotating a key's secret (a restart with `alice:<new key>`) keeps its session and hook.
import { createParser } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';
import { api as call, hookSecret, inbox as inboxAt, json, sendEvent as send, until } from './helpers/service-client.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEYS = { alice: 'sk-alice-e2e', bob: 'sk-bob-e2e', carol: 'sk-carol-e2e' };
const VARS = {
  API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob},carol:${KEYS.carol}`,
  RATE_LIMITS: JSON.stringify({ carol: { rpm: 4, tpm: 100_000 } }),
  ALLOW_LOOPBACK_CALLBACKS: 'true',
  WEBHOOK_RETRY_BASE_MS: '50',
};
const MAX_BATCH = 16;

let server: DevServer;
let receiver: { url: string; close(): Promise<void> };
beforeAll(async () => {
  receiver = await startWebhookReceiver();
  server = await startDevServer(VARS);
});
afterAll(async () => {
  await server?.stop();
  await receiver?.close();
});

const api = (key: string, method: string, path: string, body?: unknown) => call(server.url, key, method, path, body);
const secret = hookSecret;
const inbox = (key: string, hookSecret: string) => inboxAt(receiver.url, key, hookSecret);
const sendEvent = (ref: string, hookSecret: string, event: unknown) => send(server.url, ref, hookSecret, event);

const settledJob = (key: string, id: string) =>
  until(
    `job ${id}`,
    async () => json<{ status: string; key_name: string }>(await api(key, 'GET', `/v1/jobs/${id}`)),
    (job) => job.status === 'delivered' || job.status === 'failed',
  );

const hookConfig = (callback_url: string, hookSecret: string) => ({
  template: 'Summarise: {{ text }}',
  callback_url,
  secret: hookSecret,
  params: { max_tokens: 4 },
});

// Made in the first tests, checked again after the key rotation at the end.
const alices = { session: '', hookId: '', hookSecret: '' };

describe('each key sees only its own sessions, hooks and jobs', () => {
  it('bob gets 404 on alice session, job and hook; both have a hook named summarise, each receiving only its own events', async () => {
    const session = await json<{ id: string; key_name: string }>(
      await api(KEYS.alice, 'POST', '/v1/sessions', { system: 'Be brief.' }),
      201,
    );
    expect(session.key_name).toBe('alice');
    alices.session = session.id;
    await json(await api(KEYS.alice, 'POST', `/v1/sessions/${session.id}/messages`, { content: 'Hi', max_tokens: 4 }));
    for (const [method, path, body] of [
      ['GET', `/v1/sessions/${session.id}`, undefined],
      ['POST', `/v1/sessions/${session.id}/messages`, { content: 'mine?' }],
      ['DELETE', `/v1/sessions/${session.id}`, undefined],
    ] as const) {
      const error = await json<{ error: { code: string } }>(await api(KEYS.bob, method, path, body), 404);
      expect(error.error.code).toBe('session_not_found');
    }

    const [secretA, secretB] = [secret(), secret()];
    const [boxA, boxB] = [await inbox('alice-summarise', secretA), await inbox('bob-summarise', secretB)];
    const hookA = await json<{ id: string; url: string }>(
      await api(KEYS.alice, 'PUT', '/v1/hooks/summarise', hookConfig(boxA.url, secretA)),
      201,
    );
    const hookB = await json<{ id: string; url: string }>(
      await api(KEYS.bob, 'PUT', '/v1/hooks/summarise', hookConfig(boxB.url, secretB)),
      201,
    );
    Object.assign(alices, { hookId: hookA.id, hookSecret: secretA });
    expect(hookA.url).toBe(`${server.url}/v1/hooks/${hookA.id}`);
    expect(hookB.id).not.toBe(hookA.id);
    expect((await json<{ callback_url: string }>(await api(KEYS.bob, 'GET', '/v1/hooks/summarise'))).callback_url).toBe(
      boxB.url,
    );

    const jobA = (await json<{ job_id: string }>(await sendEvent(hookA.id, secretA, { text: 'for alice' }), 202))
      .job_id;
    const jobB = (await json<{ job_id: string }>(await sendEvent(hookB.id, secretB, { text: 'for bob' }), 202)).job_id;
    expect(await settledJob(KEYS.alice, jobA)).toMatchObject({ status: 'delivered', key_name: 'alice' });
    expect(await settledJob(KEYS.bob, jobB)).toMatchObject({ status: 'delivered', key_name: 'bob' });
    expect((await boxA.deliveries()).map((d) => [JSON.parse(d.body).job_id, d.verified])).toEqual([[jobA, true]]);
    expect((await boxB.deliveries()).map((d) => [JSON.parse(d.body).job_id, d.verified])).toEqual([[jobB, true]]);

    expect(
      (await json<{ error: { code: string } }>(await api(KEYS.bob, 'GET', `/v1/jobs/${jobA}`), 404)).error.code,
    ).toBe('job_not_found');
    // bob's DELETE of "summarise" deletes his own; alice's is still there and still receives.
    await json(await api(KEYS.bob, 'DELETE', '/v1/hooks/summarise'));
    await json(await api(KEYS.bob, 'GET', '/v1/hooks/summarise'), 404);
    expect((await json<{ id: string }>(await api(KEYS.alice, 'GET', '/v1/hooks/summarise'))).id).toBe(hookA.id);
    // With several keys a name alone is ambiguous: events go to the hook's url.
    expect((await sendEvent('summarise', secretA, { text: 'by name' })).status).toBe(404);
  });

  it('a limited key gets 429 with the x-ratelimit-* headers and retry-after; the others are unaffected', async () => {
    // One prompt, one shard: carol's rpm of 4 over 2 shards is 2 there.
    const body = { prompt: 'Rate me', max_tokens: 2 };
    const statuses: number[] = [];
    let refused: Response | undefined;
    for (let i = 0; i < 3; i++) {
      const res = await api(KEYS.carol, 'POST', '/v1/completions', body);
      statuses.push(res.status);
      if (res.status === 200) {
        expect(res.headers.get('x-ratelimit-limit-requests')).toBe('2');
        expect(res.headers.get('x-ratelimit-remaining-requests')).toBe(String(1 - i));
        expect(res.headers.get('x-ratelimit-limit-tokens')).toBe('50000');
      }
      if (res.status === 429) refused = res;
      else await res.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(refused!.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(refused!.headers.get('x-ratelimit-reset-requests')).toMatch(/^(\d+(\.\d+)?s|1m0s)$/);
    expect(Number(refused!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const error = (await refused!.json()) as { error: { type: string; code: string; message: string } };
    expect(error.error).toMatchObject({ type: 'requests', code: 'rate_limit_exceeded' });
    expect(error.error.message).not.toContain(KEYS.carol);
    const other = await api(KEYS.alice, 'POST', '/v1/completions', body);
    expect(other.status).toBe(200);
    expect(other.headers.get('x-ratelimit-limit-requests')).toBeNull();
    await other.arrayBuffer();
  });

  it('/metrics counts usage per key name and shows no key', async () => {
    const text = await (await api(KEYS.bob, 'GET', '/metrics')).text();
    for (const key of Object.values(KEYS)) expect(text).not.toContain(key);
    const sum = (metric: string, key: string) =>
      text
        .split('\n')
        .filter((l) => l.startsWith(`${metric}{`) && l.includes(`key="${key}"`))
        .reduce((s, l) => s + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    for (const key of ['alice', 'bob', 'carol'])
      expect(sum('edge_infer_key_completion_tokens_total', key), key).toBeGreaterThan(0);
    expect(sum('edge_infer_key_rate_limited_total', 'carol')).toBe(1);
  });
});

interface Timed {
  label: string;
  sentAt: number;
  firstTokenAt?: number;
  doneAt?: number;
}

/** A streamed completion, timing its first token and its end. */
async function timedStream(key: string, label: string, body: Record<string, unknown>): Promise<Timed> {
  const timed: Timed = { label, sentAt: performance.now() };
  const res = await api(key, 'POST', '/v1/completions', { ...body, stream: true });
  expect(res.status, label).toBe(200);
  const parser = createParser({
    onEvent(message) {
      if (message.data !== '[DONE]' && timed.firstTokenAt === undefined) timed.firstTokenAt = performance.now();
    },
  });
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) parser.feed(decoder.decode(chunk));
  timed.doneAt = performance.now();
  return timed;
}

async function queueDepth(): Promise<number> {
  const text = await (await api(KEYS.alice, 'GET', '/metrics')).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('edge_infer_queue_depth{'))
    .reduce((s, l) => s + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

/**
 * 48 streams from alice, then, once they are queued, 3 from `probe`'s key (same prompt: the same shard).
 * Returns, for each probe, how many of alice's requests got their first token before it, and the timings.
 */
async function burst(probe: string) {
  const body = { prompt: 'Fair share, please.', max_tokens: 96, ignore_eos: true, temperature: 0 };
  const burst = Array.from({ length: 48 }, (_, i) => timedStream(KEYS.alice, `A${i}`, body));
  for (const end = Date.now() + 10_000; (await queueDepth()) < 48 - MAX_BATCH - 4 && Date.now() < end; )
    await new Promise((resolve) => setTimeout(resolve, 10));
  const probes = await Promise.all(
    Array.from({ length: 3 }, (_, i) => timedStream(probe, `P${i}`, { ...body, max_tokens: 8 })),
  );
  const alice = await Promise.all(burst);
  const ahead = probes.map((p) => alice.filter((a) => a.firstTokenAt! < p.firstTokenAt!).length);
  const waits = probes.map((p) => p.firstTokenAt! - p.sentAt);
  // How long one of alice's requests runs once admitted: the wait a probe sees behind one full batch.
  const run = alice.map((a) => a.doneAt! - a.firstTokenAt!).sort((x, y) => x - y)[alice.length >> 1];
  return { ahead, waits, run };
}

describe('a burst from one key does not starve another on the same shard', () => {
  it('48 from alice: bob is served after at most the batch already running; alice own probes wait for all 48', async () => {
    await timedStream(KEYS.alice, 'warm', { prompt: 'Fair share, please.', max_tokens: 2 });
    const fair = await burst(KEYS.bob);
    const fcfs = await burst(KEYS.alice);
    const ms = (v: number[]) => v.map((x) => `${Math.round(x)} ms`).join(', ');
    console.log(
      `fair queue (MAX_BATCH ${MAX_BATCH}, 48 × 96 tokens from alice): bob's requests had ${fair.ahead.join(', ')} of alice's ahead, ` +
        `first token after ${ms(fair.waits)}; alice's own probes had ${fcfs.ahead.join(', ')} ahead, first token after ${ms(fcfs.waits)}; ` +
        `one of alice's requests runs ${Math.round(fair.run)} ms once admitted`,
    );
    // The bound: bob's requests wait only for the batch that was running when they came (MAX_BATCH of alice's)
    // and the ones admitted in the same step as them; never for alice's queue.
    for (const ahead of fair.ahead) expect(ahead).toBeLessThanOrEqual(2 * MAX_BATCH);
    // The same probes under alice's key queue behind her whole burst (first come, first served within a key).
    for (const ahead of fcfs.ahead) expect(ahead).toBeGreaterThanOrEqual(48 - 4);
  });
});

describe('key rotation', () => {
  it('a restart with alice:<new key> keeps her session and hook; the old key is refused', async () => {
    await server.stop();
    const rotated = { ...VARS, API_KEYS: `bob:${KEYS.bob},alice:sk-alice-rotated` };
    server = await startDevServer(rotated, server.persistDir);
    const session = await json<{ id: string; key_name: string; messages: unknown[] }>(
      await api('sk-alice-rotated', 'GET', `/v1/sessions/${alices.session}`),
    );
    expect(session).toMatchObject({ id: alices.session, key_name: 'alice' });
    expect(session.messages).toHaveLength(3);
    expect((await json<{ id: string }>(await api('sk-alice-rotated', 'GET', '/v1/hooks/summarise'))).id).toBe(
      alices.hookId,
    );
    expect((await api(KEYS.alice, 'GET', `/v1/sessions/${alices.session}`)).status).toBe(401);
    // Her hook's url did not change with the key: its sender goes on as it was.
    const job = (
      await json<{ job_id: string }>(await sendEvent(alices.hookId, alices.hookSecret, { text: 'after' }), 202)
    ).job_id;
    expect(await settledJob('sk-alice-rotated', job)).toMatchObject({ status: 'delivered', key_name: 'alice' });
  });
});

/// <reference types="@cloudflare/vitest-pool-workers/types" />
// Tenants inside workerd: each API key sees only its own sessions, hooks and jobs (another key gets 404,
// as if they did not exist), hook names are per key, a renamed key keeps what it made, rows made before
// tenants stay with the deployment's single key (or LEGACY_OWNER), and per-key limits answer 429 with
// OpenAI's x-ratelimit-* headers. The app is called with its vars set per test, as a deployment would be.
import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import type { Env } from '../../src/env.js';
import { JobStore } from '../../src/objects/jobs.js';
import { ServiceMetrics } from '../../src/objects/service-metrics.js';
import { SessionStore } from '../../src/objects/sessions.js';
import { RateLimiter } from '../../src/objects/tenancy/rate-limiter.js';
import type { Tenant } from '../../src/objects/tenancy/tenant.js';
import { HookStore } from '../../src/objects/webhooks/hooks.js';
import app from '../../src/worker/app.js';
import { ANONYMOUS, bareKeyName } from '../../src/objects/tenancy/api-keys.js';
import { call, expectError, readSse, sleep } from './service-helpers.js';
import { inbox, newSecret } from './webhook-helpers.js';

type Vars = Partial<Env>;

/** What the routes answer with, loosely: sessions, hooks, completions. */
interface Body {
  id: string;
  key_name: string | null;
  url: string | null;
  name: string;
  mode: string;
  callback_url: string;
  messages: { role: string }[];
  usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } };
}
const TWO_KEYS: Vars = { API_KEYS: 'alice:sk-alice, bob:sk-bob' };

/** A client of a deployment with `vars`, holding `key` (none: no Authorization header). */
function client(vars: Vars, key?: string) {
  const deployment = { ...(env as unknown as Env), ...vars };
  const send = (path: string, init: RequestInit = {}): Promise<Response> => {
    const headers = new Headers(init.headers);
    if (key) headers.set('authorization', `Bearer ${key}`);
    if (init.body !== undefined) headers.set('content-type', 'application/json');
    return Promise.resolve(app.fetch(new Request(`http://edge-infer.test${path}`, { ...init, headers }), deployment));
  };
  const json = async <T = Body>(path: string, init: RequestInit = {}, status = 200): Promise<T> => {
    const res = await send(path, init);
    const text = await res.text();
    expect(res.status, `${init.method ?? 'GET'} ${path}: ${text}`).toBe(status);
    return JSON.parse(text) as T;
  };
  return {
    send,
    json,
    post: (path: string, body: unknown, status = 200) =>
      json(path, { method: 'POST', body: JSON.stringify(body) }, status),
    put: (path: string, body: unknown, status = 201) =>
      json(path, { method: 'PUT', body: JSON.stringify(body) }, status),
  };
}

/** A signed inbound event to `/v1/hooks/{ref}` (no key: the signature authenticates it). */
function sendEvent(vars: Vars, ref: string, secret: string, event: unknown, id = `msg_${crypto.randomUUID()}`) {
  const body = JSON.stringify(event);
  const when = new Date();
  return client(vars).send(`/v1/hooks/${ref}`, {
    method: 'POST',
    body,
    headers: {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(+when / 1000)),
      'webhook-signature': new Webhook(secret).sign(id, when, body),
    },
  });
}

async function settled(get: () => Promise<Response>): Promise<{ status: string; key_name: string | null }> {
  for (const end = Date.now() + 20_000; ; ) {
    const job = (await (await get()).json()) as { status: string; key_name: string | null };
    if (job.status === 'delivered' || job.status === 'failed') return job;
    if (Date.now() > end) throw new Error(`job still ${job.status}`);
    await sleep(25);
  }
}

let unique = 0;
const name = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${++unique}`;
const hookConfig = (callback_url: string, secret: string) => ({
  template: 'Summarise: {{ text }}',
  callback_url,
  secret,
  params: { max_tokens: 2, temperature: 0 },
});

describe('sessions and jobs belong to the key that made them', () => {
  const alice = client(TWO_KEYS, 'sk-alice');
  const bob = client(TWO_KEYS, 'sk-bob');

  it('another key gets 404 on a session, exactly as for one that does not exist, and changes nothing', async () => {
    const session = await alice.post('/v1/sessions', { system: 'Be brief.', defaults: { max_tokens: 3 } }, 201);
    expect(session.key_name).toBe('alice');
    await alice.post(`/v1/sessions/${session.id}/messages`, { content: 'Hi' });
    const missing = `${session.id.slice(0, -4)}ffff`;
    for (const [method, path, body] of [
      ['GET', `/v1/sessions/${session.id}`, undefined],
      ['DELETE', `/v1/sessions/${session.id}`, undefined],
      ['POST', `/v1/sessions/${session.id}/messages`, JSON.stringify({ content: 'mine now?' })],
    ] as const) {
      const theirs = await expectError(await bob.send(path, { method, body }), 404, null, 'session_not_found');
      const none = await expectError(
        await bob.send(path.replace(session.id, missing), { method, body }),
        404,
        null,
        'session_not_found',
      );
      expect(theirs.message.replace(session.id, missing)).toBe(none.message);
    }
    const shown = await alice.json(`/v1/sessions/${session.id}`);
    expect(shown.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant']);
    // Not even a turn in flight tells bob it exists: busy (409) is only ever said to its owner.
    const streaming = await alice.send(`/v1/sessions/${session.id}/messages`, {
      method: 'POST',
      body: JSON.stringify({ content: 'long', max_tokens: 200, ignore_eos: true, stream: true }),
    });
    await expectError(
      await bob.send(`/v1/sessions/${session.id}/messages`, { method: 'POST', body: '{"content":"x"}' }),
      404,
    );
    await readSse(streaming);
    expect((await alice.send(`/v1/sessions/${session.id}`, { method: 'DELETE' })).status).toBe(200);
  });

  it("another key gets 404 on a job; its owner sees it with the key's name", async () => {
    const secret = newSecret();
    const box = await inbox(secret);
    const hook = await alice.put(`/v1/hooks/${name('jobs')}`, hookConfig(box.url, secret));
    const accepted = await sendEvent(TWO_KEYS, hook.id, secret, { text: 'an event' });
    expect(accepted.status).toBe(202);
    const { job_id } = (await accepted.json()) as { job_id: string };
    const job = await settled(() => alice.send(`/v1/jobs/${job_id}`));
    expect(job).toMatchObject({ status: 'delivered', key_name: 'alice' });
    await expectError(await bob.send(`/v1/jobs/${job_id}`), 404, null, 'job_not_found');
  });
});

describe('hooks are per key', () => {
  const alice = client(TWO_KEYS, 'sk-alice');
  const bob = client(TWO_KEYS, 'sk-bob');

  for (const shards of ['1', '2']) {
    it(`both keys have a hook named summarise, each receiving only its own events (SHARD_COUNT=${shards})`, async () => {
      const vars = { ...TWO_KEYS, SHARD_COUNT: shards };
      const [a, b] = [client(vars, 'sk-alice'), client(vars, 'sk-bob')];
      const hookName = name('summarise');
      const [secretA, secretB] = [newSecret(), newSecret()];
      const [boxA, boxB] = [await inbox(secretA), await inbox(secretB)];
      const hookA = await a.put(`/v1/hooks/${hookName}`, hookConfig(boxA.url, secretA));
      const hookB = await b.put(`/v1/hooks/${hookName}`, hookConfig(boxB.url, secretB));
      expect(hookA).toMatchObject({ name: hookName, key_name: 'alice', callback_url: boxA.url });
      expect(hookB).toMatchObject({ name: hookName, key_name: 'bob', callback_url: boxB.url });
      expect(hookA.id).toMatch(/^hk_\d+\.[0-9a-f]{24}$/);
      expect(hookA.url).toBe(`http://edge-infer.test/v1/hooks/${hookA.id}`);
      expect(hookB.id).not.toBe(hookA.id);
      expect(JSON.stringify([hookA, hookB])).not.toMatch(/owner|sk-/);
      // Each sees its own; replacing one leaves the other (and keeps the id).
      expect((await b.json(`/v1/hooks/${hookName}`)).callback_url).toBe(boxB.url);
      const replaced = await a.put(
        `/v1/hooks/${hookName}`,
        { ...hookConfig(boxA.url, secretA), mode: 'completion' },
        200,
      );
      expect(replaced.id).toBe(hookA.id);
      expect((await b.json(`/v1/hooks/${hookName}`)).mode).toBe('chat');

      // The same webhook-id from both senders: two events, one job each (dedupe is per owner).
      const same = `msg_${crypto.randomUUID()}`;
      const jobA = await sendEvent(vars, hookA.id, secretA, { text: 'for alice' }, same);
      const jobB = await sendEvent(vars, hookB.id, secretB, { text: 'for bob' }, same);
      expect([jobA.status, jobB.status]).toEqual([202, 202]);
      const idA = ((await jobA.json()) as { job_id: string }).job_id;
      const idB = ((await jobB.json()) as { job_id: string }).job_id;
      await settled(() => a.send(`/v1/jobs/${idA}`));
      await settled(() => b.send(`/v1/jobs/${idB}`));
      const [gotA, gotB] = [await boxA.deliveries(), await boxB.deliveries()];
      expect(gotA.map((d) => JSON.parse(d.body).job_id)).toEqual([idA]);
      expect(gotB.map((d) => JSON.parse(d.body).job_id)).toEqual([idB]);
      expect([...gotA, ...gotB].every((d) => d.verified)).toBe(true);
      // Signed with the other hook's secret: refused, nothing runs.
      await expectError(await sendEvent(vars, hookA.id, secretB, { text: 'forged' }), 401, null, 'invalid_signature');

      // With several keys a name alone does not say whose hook: 404, pointing at the ids.
      const byName = await expectError(
        await sendEvent(vars, hookName, secretA, { text: 'x' }),
        404,
        null,
        'hook_not_found',
      );
      expect(byName.message).toContain('hk_');
      // Deleting bob's leaves alice's.
      expect((await b.send(`/v1/hooks/${hookName}`, { method: 'DELETE' })).status).toBe(200);
      await expectError(await b.send(`/v1/hooks/${hookName}`), 404, null, 'hook_not_found');
      expect((await a.json(`/v1/hooks/${hookName}`)).id).toBe(hookA.id);
      await expectError(await sendEvent(vars, hookB.id, secretB, { text: 'gone' }), 404, null, 'hook_not_found');
    });
  }

  it('ids that were never issued, or name a shard past SHARD_COUNT, are 404 without reaching a hook', async () => {
    const secret = newSecret();
    for (const ref of ['hk_0.0123456789abcdef01234567', 'hk_7.0123456789abcdef01234567', 'hk_x', 'hk_'])
      await expectError(await sendEvent(TWO_KEYS, ref, secret, {}), 404, null, 'hook_not_found');
    // Names may not look like ids.
    await expectError(
      await alice.send('/v1/hooks/hk_mine', {
        method: 'PUT',
        body: JSON.stringify(hookConfig('https://example.com', secret)),
      }),
      400,
      'name',
      'invalid_value',
    );
    await expectError(await bob.send('/v1/hooks/hk_0.0123456789abcdef01234567'), 404, null, 'hook_not_found');
  });
});

describe('key rotation keeps what a key made', () => {
  it('alice:new (after alice:old, alice:new during the rollover) keeps her session and hook; the old key is refused', async () => {
    const before = { API_KEYS: 'alice:sk-old,bob:sk-bob' };
    const during = { API_KEYS: 'alice:sk-old,alice:sk-new,bob:sk-bob' };
    const after = { API_KEYS: 'bob:sk-bob,alice:sk-new' };
    const session = await client(before, 'sk-old').post('/v1/sessions', {}, 201);
    const hookName = name('rotate');
    const secret = newSecret();
    const hook = await client(before, 'sk-old').put(
      `/v1/hooks/${hookName}`,
      hookConfig('https://example.com/h', secret),
    );
    for (const key of ['sk-old', 'sk-new'])
      expect((await client(during, key).json(`/v1/sessions/${session.id}`)).key_name).toBe('alice');
    const rotated = client(after, 'sk-new');
    expect((await rotated.json(`/v1/sessions/${session.id}`)).id).toBe(session.id);
    expect((await rotated.json(`/v1/hooks/${hookName}`)).id).toBe(hook.id);
    await expectError(await client(after, 'sk-old').send(`/v1/sessions/${session.id}`), 401, null, 'invalid_api_key');
    await expectError(await client(after, 'sk-bob').send(`/v1/sessions/${session.id}`), 404);
  });

  it('a bare key is named by its hash, and keeps its things when it is given that name', async () => {
    const bare = client({ API_KEYS: 'sk-bare-one,bob:sk-bob' }, 'sk-bare-one');
    const session = await bare.post('/v1/sessions', {}, 201);
    const derived = await bareKeyName('sk-bare-one');
    expect(session.key_name).toBe(derived);
    expect(derived).toMatch(/^key-[0-9a-f]{12}$/);
    const renamed = client({ API_KEYS: `${derived}:sk-bare-two,bob:sk-bob` }, 'sk-bare-two');
    expect((await renamed.json(`/v1/sessions/${session.id}`)).id).toBe(session.id);
  });

  it('OWNER_SECRET changes every owner: set it once, before keys are handed out', async () => {
    const session = await client({ ...TWO_KEYS, OWNER_SECRET: 's1' }, 'sk-alice').post('/v1/sessions', {}, 201);
    expect((await client({ ...TWO_KEYS, OWNER_SECRET: 's1' }, 'sk-alice').json(`/v1/sessions/${session.id}`)).id).toBe(
      session.id,
    );
    await expectError(
      await client({ ...TWO_KEYS, OWNER_SECRET: 's2' }, 'sk-alice').send(`/v1/sessions/${session.id}`),
      404,
    );
  });
});

describe('rows made before tenants (and in dev mode) belong to the anonymous owner', () => {
  it('a single-key deployment keeps them; with several keys only LEGACY_OWNER does', async () => {
    // Dev mode writes anonymous rows, as every row made before tenants reads now.
    const dev = client({ API_KEYS: '' });
    const session = await dev.post('/v1/sessions', {}, 201);
    expect(session.key_name).toBe('anonymous');
    const hookName = name('legacy');
    const secret = newSecret();
    const box = await inbox(secret);
    await dev.put(`/v1/hooks/${hookName}`, hookConfig(box.url, secret));

    const single = { API_KEYS: 'solo:sk-solo' };
    const solo = client(single, 'sk-solo');
    expect((await solo.json(`/v1/sessions/${session.id}`)).id).toBe(session.id);
    expect((await solo.json(`/v1/hooks/${hookName}`)).key_name).toBe('anonymous');
    // Its old URL (by name) keeps working: one owner can be meant.
    expect((await sendEvent(single, hookName, secret, { text: 'still here' })).status).toBe(202);
    // PUT replaces it in place (same id) rather than making a second one.
    const replaced = await solo.put(`/v1/hooks/${hookName}`, hookConfig(box.url, secret), 200);
    expect(replaced.key_name).toBe('anonymous');
    // A new hook of the single key is reachable by name too.
    const own = name('solo');
    const made = await solo.put(`/v1/hooks/${own}`, hookConfig(box.url, secret));
    expect(made.key_name).toBe('solo');
    expect((await sendEvent(single, own, secret, { text: 'by name' })).status).toBe(202);

    const several = { API_KEYS: 'solo:sk-solo,other:sk-other' };
    await expectError(await client(several, 'sk-solo').send(`/v1/sessions/${session.id}`), 404);
    await expectError(await client(several, 'sk-other').send(`/v1/sessions/${session.id}`), 404);
    const handed = { ...several, LEGACY_OWNER: 'solo' };
    expect((await client(handed, 'sk-solo').json(`/v1/sessions/${session.id}`)).id).toBe(session.id);
    await expectError(await client(handed, 'sk-other').send(`/v1/sessions/${session.id}`), 404);
    // Hooks made before tenants keep their URL by name whatever the keys: their senders cannot change.
    expect((await sendEvent(several, hookName, secret, { text: 'old sender' })).status).toBe(202);
    await expectError(await sendEvent(several, own, secret, { text: 'x' }), 404, null, 'hook_not_found');
  });
});

describe('per-key limits', () => {
  // A shard counts each key's use whether or not it is limited, so each test gets key names of its own.
  const limited = (limits: Record<string, unknown>, extra: Vars = {}) => {
    const n = ++unique;
    const renamed = Object.fromEntries(Object.entries(limits).map(([k, v]) => [k === 'default' ? k : `${k}${n}`, v]));
    return {
      API_KEYS: `alice${n}:sk-alice,bob${n}:sk-bob`,
      SHARD_COUNT: '1',
      RATE_LIMITS: JSON.stringify(renamed),
      ...extra,
    };
  };
  const completion = { prompt: 'Count me', max_tokens: 2, temperature: 0 };

  it('rpm: 429 with the x-ratelimit-* and retry-after headers past it; other keys go on; refused input and creation count', async () => {
    const vars = limited({ default: { rpm: 100 }, alice: { rpm: 3 } });
    const alice = client(vars, 'sk-alice');
    // Refused by the shard (400), it still cost the shard its time: it takes a slot (issue 34).
    await expectError(
      await alice.send('/v1/completions', { method: 'POST', body: JSON.stringify({ ...completion, temperature: -1 }) }),
      400,
    );
    const first = await alice.send('/v1/completions', { method: 'POST', body: JSON.stringify(completion) });
    expect(first.status).toBe(200);
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe('3');
    expect(first.headers.get('x-ratelimit-remaining-requests'), 'the 400 used one').toBe('1');
    expect(first.headers.get('x-ratelimit-reset-requests')).toMatch(/^(1m0s|\d+(\.\d+)?s)$/);
    expect(first.headers.get('x-ratelimit-limit-tokens')).toBeNull();
    await first.arrayBuffer();
    // Streams carry them too.
    const second = await alice.send('/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, stream: true }),
    });
    expect(second.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    await readSse(second);
    const refused = await alice.send('/v1/completions', { method: 'POST', body: JSON.stringify(completion) });
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(refused.headers.get('retry-after-ms'))).toBeGreaterThan(0);
    const error = await expectError(refused, 429, null, 'rate_limit_exceeded');
    expect(error.type).toBe('requests');
    expect(error.message).toMatch(/key 'alice\d+'/);
    expect(error.message).not.toContain('sk-alice');
    // Creating a session is a request too; bob has his own window.
    await expectError(
      await alice.send('/v1/sessions', { method: 'POST', body: '{}' }),
      429,
      null,
      'rate_limit_exceeded',
    );
    const bob = await client(vars, 'sk-bob').send('/v1/completions', {
      method: 'POST',
      body: JSON.stringify(completion),
    });
    expect(bob.status).toBe(200);
    expect(bob.headers.get('x-ratelimit-limit-requests')).toBe('100');
    await bob.arrayBuffer();
  });

  it('tpm: refused once the generated tokens of the last minute reach it', async () => {
    const alice = client(limited({ alice: { tpm: 6 } }), 'sk-alice');
    const body = JSON.stringify({ ...completion, max_tokens: 4, ignore_eos: true });
    const first = await alice.send('/v1/completions', { method: 'POST', body });
    expect(first.headers.get('x-ratelimit-remaining-tokens')).toBe('6');
    await first.arrayBuffer();
    const second = await alice.send('/v1/completions', { method: 'POST', body });
    expect(second.headers.get('x-ratelimit-remaining-tokens')).toBe('2');
    await second.arrayBuffer();
    await sleep(50); // the tokens are charged when the generation has ended
    const refused = await alice.send('/v1/completions', { method: 'POST', body });
    expect(refused.headers.get('x-ratelimit-remaining-tokens')).toBe('0');
    expect((await expectError(refused, 429, null, 'rate_limit_exceeded')).type).toBe('tokens');
  });

  it('concurrent: a second stream while the first runs is refused, and admitted once it has ended', async () => {
    const alice = client(limited({ alice: { concurrent: 1 } }), 'sk-alice');
    const long = JSON.stringify({ ...completion, max_tokens: 1500, ignore_eos: true, stream: true });
    const running = await alice.send('/v1/completions', { method: 'POST', body: long });
    expect(running.status).toBe(200);
    await expectError(
      await alice.send('/v1/completions', { method: 'POST', body: JSON.stringify(completion) }),
      429,
      null,
      'concurrency_limit_exceeded',
    );
    await readSse(running);
    await sleep(50);
    const after = await alice.send('/v1/completions', { method: 'POST', body: JSON.stringify(completion) });
    expect(after.status).toBe(200);
    await after.arrayBuffer();
  });

  it("inbound events count against the hook owner's limits", async () => {
    // Two: the hook's creation takes one (issue 34), the first event the other.
    const vars = limited({ alice: { rpm: 2 } });
    const secret = newSecret();
    const box = await inbox(secret);
    const hook = await client(vars, 'sk-alice').put(`/v1/hooks/${name('limited')}`, hookConfig(box.url, secret));
    const first = await sendEvent(vars, hook.id, secret, { text: 'one' });
    expect(first.status).toBe(202);
    expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const refused = await sendEvent(vars, hook.id, secret, { text: 'two' });
    expect(refused.headers.get('retry-after')).not.toBeNull();
    await expectError(refused, 429, null, 'rate_limit_exceeded');
  });

  it('a RATE_LIMITS that cannot be read is a 503 naming it, never unlimited', async () => {
    const bad = client({ ...TWO_KEYS, RATE_LIMITS: '{"alice":{"rps":1}}' }, 'sk-alice');
    const error = await expectError(
      await bad.send('/v1/completions', { method: 'POST', body: JSON.stringify(completion) }),
      503,
      null,
      'invalid_rate_limits',
    );
    expect(error.message).toContain('RATE_LIMITS.alice.rps');
  });

  it('each shard enforces its share: rpm 5 over 2 shards is 3 on shard 0 and 2 on shard 1', async () => {
    const vars = limited({ alice: { rpm: 5 } }, { SHARD_COUNT: '2' });
    const alice = client(vars, 'sk-alice');
    const limits = new Map<string, string | null>();
    // Sessions spread over the shards by their system prompt; each answer (200 or 429) names its shard's share.
    // A session's creation takes a slot too, so a shard already spent refuses it: try the next prompt.
    for (let i = 0; i < 16 && limits.size < 2; i++) {
      const created = await alice.send('/v1/sessions', {
        method: 'POST',
        body: JSON.stringify({ system: `share ${i} ${Date.now()}` }),
      });
      if (created.status !== 201) {
        await created.arrayBuffer();
        continue;
      }
      const session = (await created.json()) as Body;
      const res = await alice.send(`/v1/sessions/${session.id}/messages`, {
        method: 'POST',
        body: JSON.stringify({ content: 'x', max_tokens: 1 }),
      });
      limits.set(session.id.split('.')[0], res.headers.get('x-ratelimit-limit-requests'));
      await res.arrayBuffer();
    }
    expect(Object.fromEntries(limits)).toEqual({ '0': '3', '1': '2' });
  });
});

describe('usage per key on /metrics', () => {
  it('counts prompt, completion and cached tokens under each key name, and never shows a key', async () => {
    const vars = { API_KEYS: 'alice:sk-alice-metrics,bob:sk-bob-metrics' };
    const metrics = async () => {
      const text = await (await client(vars, 'sk-bob-metrics').send('/metrics')).text();
      expect(text).not.toContain('sk-');
      const value = (metric: string, key: string) =>
        text
          .split('\n')
          .filter((l) => l.startsWith(`${metric}{`) && l.includes(`key="${key}"`))
          .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
      return (key: string) => ({
        requests: value('edge_infer_key_requests_total', key),
        prompt: value('edge_infer_key_prompt_tokens_total', key),
        completion: value('edge_infer_key_completion_tokens_total', key),
        cached: value('edge_infer_key_cached_tokens_total', key),
      });
    };
    const before = await metrics();
    const prompt = `Metrics for alice ${Date.now()} `.repeat(4);
    const body = JSON.stringify({ prompt, max_tokens: 3, ignore_eos: true, temperature: 0 });
    const usages = [];
    for (let i = 0; i < 2; i++) {
      const res = await client(vars, 'sk-alice-metrics').json('/v1/completions', { method: 'POST', body });
      usages.push(res.usage);
    }
    const after = await metrics();
    const delta = (key: string) => {
      const [a, b] = [after(key), before(key)];
      return {
        requests: a.requests - b.requests,
        prompt: a.prompt - b.prompt,
        completion: a.completion - b.completion,
        cached: a.cached - b.cached,
      };
    };
    expect(delta('alice')).toEqual({
      requests: 2,
      prompt: usages[0].prompt_tokens + usages[1].prompt_tokens,
      completion: 6,
      cached: usages[0].prompt_tokens_details.cached_tokens + usages[1].prompt_tokens_details.cached_tokens,
    });
    expect(delta('alice').cached).toBeGreaterThan(0);
    expect(delta('bob')).toEqual({ requests: 0, prompt: 0, completion: 0, cached: 0 });
  });
});

describe('dev mode', () => {
  it('is one anonymous owner: what it makes is shown as the anonymous key', async () => {
    const res = await call('/v1/sessions', { method: 'POST', body: '{}' });
    expect(((await res.json()) as { key_name: string }).key_name).toBe('anonymous');
  });
});

describe('migrations: tables made before tenants', () => {
  it('gain owners without losing a row; hooks and jobs are rebuilt for per-owner names and webhook-ids', async () => {
    const ns = (env as unknown as Cloudflare.Env).INFERENCE;
    const stub = ns.get(ns.idFromName(`migration-${Date.now()}`));
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      // The schemas as they were before tenants, with a row each.
      sql.exec(`CREATE TABLE sessions (id TEXT PRIMARY KEY, model TEXT NOT NULL, system TEXT, defaults TEXT NOT NULL,
        messages TEXT NOT NULL, token_ids TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)`);
      sql.exec(`INSERT INTO sessions VALUES ('0.old', 'tiny', NULL, '{}', '[]', '[]', 1, 1)`);
      sql.exec(`CREATE TABLE hooks (name TEXT PRIMARY KEY, template TEXT NOT NULL, callback_url TEXT NOT NULL,
        secret TEXT NOT NULL, params TEXT NOT NULL, mode TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)`);
      sql.exec(
        `INSERT INTO hooks VALUES ('summarise', 'Hi {{ x }}', 'https://example.com/h', 'whsec_x', '{}', 'chat', 1, 1)`,
      );
      sql.exec(`CREATE TABLE jobs (id TEXT PRIMARY KEY, hook TEXT NOT NULL, webhook_id TEXT NOT NULL, prompt TEXT NOT NULL,
        mode TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, result TEXT,
        error TEXT, last_error TEXT, next_attempt_at INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
        UNIQUE (hook, webhook_id))`);
      sql.exec('CREATE INDEX jobs_by_status ON jobs (status, next_attempt_at)');
      sql.exec(`INSERT INTO jobs (id, hook, webhook_id, prompt, mode, params, status, created_at, updated_at)
        VALUES ('0.job', 'summarise', 'msg_1', 'p', 'chat', '{}', 'delivered', 1, 1)`);

      const shard = {
        sql,
        engine: () => Promise.reject(new Error('no engine in this test')),
        loadedEngine: () => undefined,
        metrics: new ServiceMetrics(),
        limiter: new RateLimiter(),
        cacheSalt: (owner: string) => owner,
        unavailable: () => {
          throw new Error('no engine in this test');
        },
        model: 'tiny',
        kvStore: undefined,
      };
      const alice: Tenant = { owner: 'a'.repeat(64), name: 'alice', legacy: false };
      const solo: Tenant = { owner: 'b'.repeat(64), name: 'solo', legacy: true };
      for (let open = 0; open < 2; open++) {
        // Opening twice: the second finds the new schema and changes nothing.
        const sessions = new SessionStore(shard);
        const hooks = new HookStore(sql);
        const jobs = new JobStore(sql);
        expect(sessions.get('0.old', ANONYMOUS)).toMatchObject({ ok: true, value: { id: '0.old', key_name: null } });
        expect(sessions.get('0.old', solo).ok).toBe(true);
        expect(sessions.get('0.old', alice).ok).toBe(false);
        expect(hooks.find(solo, 'summarise')).toMatchObject({ owner: '', id: null, template: 'Hi {{ x }}' });
        expect(hooks.find(alice, 'summarise')).toBeUndefined();
        expect(jobs.getFor('0.job', solo)).toMatchObject({ owner: '', hookId: null, status: 'delivered' });
        expect(jobs.getFor('0.job', alice)).toBeUndefined();
      }
      // Two owners' hooks of one name, and the same webhook-id from each: allowed now.
      const hooks = new HookStore(sql);
      const config = {
        template: 'x',
        callback_url: 'https://example.com',
        secret: 'whsec_y',
        params: {},
        mode: 'chat' as const,
      };
      expect(hooks.put(alice, 'summarise', config, 'hk_0.aaaaaaaa', true)?.created).toBe(true);
      expect(hooks.put(solo, 'summarise', config, 'hk_0.bbbbbbbb', true)).toMatchObject({
        created: false,
        hook: { owner: '', id: 'hk_0.bbbbbbbb' },
      });
      const jobs = new JobStore(sql);
      const job = {
        hook: 'summarise',
        hookId: null,
        keyName: 'alice',
        webhookId: 'msg_1',
        prompt: 'p',
        mode: 'chat' as const,
        params: {},
      };
      expect(jobs.create({ ...job, id: '0.new', owner: alice.owner }).owner).toBe(alice.owner);
      expect(() => jobs.create({ ...job, id: '0.dup', owner: '' })).toThrow();
      expect(
        sql.exec("SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'jobs_by_status'").toArray(),
      ).toHaveLength(1);
    });
  });
});

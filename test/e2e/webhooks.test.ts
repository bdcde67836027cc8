// Webhook-triggered generation end to end: `wrangler dev` over real HTTP, inbound events signed with the
// `standardwebhooks` package, and deliveries to a real loopback receiver that verifies them with it too.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';
import { hookSecret, inbox as inboxAt, sendEvent as send } from './helpers/service-client.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEY = 'hooks-key';
let server: DevServer;
let receiver: { url: string; close(): Promise<void> };

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  server = await startDevServer({
    API_KEYS: KEY,
    WEBHOOK_RETRY_BASE_MS: '50',
    WEBHOOK_MAX_ATTEMPTS: '4',
    ALLOW_LOOPBACK_CALLBACKS: 'true',
  });
});
afterAll(async () => {
  await server?.stop();
  await receiver?.close();
});

const secret = hookSecret;

/** A receiver inbox that checks signatures with `secret` and fails the first `fail` deliveries. */
const inbox = (key: string, hookSecret: string, fail = 0) => inboxAt(receiver.url, key, hookSecret, { fail });

function putHook(name: string, config: Record<string, unknown>, key = KEY): Promise<Response> {
  return fetch(`${server.url}/v1/hooks/${name}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${key}` },
    body: JSON.stringify(config),
  });
}

const sendEvent = (name: string, hookSecret: string, event: unknown, options?: Parameters<typeof send>[4]) =>
  send(server.url, name, hookSecret, event, options);

interface Job {
  status: string;
  attempts: number;
  result?: { text: string };
}

async function job(id: string): Promise<Job> {
  return (await (
    await fetch(`${server.url}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${KEY}` } })
  ).json()) as Job;
}

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('webhook-triggered generation', () => {
  it('round trip: a signed event starts a job whose result is delivered, signed, to the callback', async () => {
    const s = secret();
    const box = await inbox('round-trip', s);
    expect(
      (
        await putHook('summary', {
          template: 'Summarise: {{ event.text }}',
          callback_url: box.url,
          secret: s,
          params: { max_tokens: 8 },
        })
      ).status,
    ).toBe(201);
    const res = await sendEvent('summary', s, { text: 'the quick brown fox' });
    expect(res.status).toBe(202);
    const { job_id } = (await res.json()) as { job_id: string };
    const delivered = await until(
      () => job(job_id),
      (j) => j.status === 'delivered',
      'delivery',
    );
    expect(delivered.attempts).toBe(1);
    const [delivery] = await box.deliveries();
    expect(delivery.verified).toBe(true);
    const payload = JSON.parse(delivery.body);
    expect(payload).toMatchObject({
      type: 'generation.completed',
      job_id,
      hook: 'summary',
      output: { text: delivered.result!.text },
    });
    expect(payload.output.usage.completion_tokens).toBeGreaterThan(0);
    expect(['stop', 'length']).toContain(payload.output.finish_reason);
  });

  it('a receiver that fails twice gets the result on the third attempt, with backoff', async () => {
    const s = secret();
    const box = await inbox('flaky', s, 2);
    await putHook('flaky', {
      template: 'Hello {{ event.name }}',
      callback_url: box.url,
      secret: s,
      params: { max_tokens: 4 },
    });
    const { job_id } = (await (await sendEvent('flaky', s, { name: 'Ada' })).json()) as { job_id: string };
    const done = await until(
      () => job(job_id),
      (j) => j.status === 'delivered' || j.status === 'failed',
      'delivery',
    );
    expect(done).toMatchObject({ status: 'delivered', attempts: 3 });
    const deliveries = await box.deliveries();
    expect(deliveries.map((d) => d.status)).toEqual([503, 503, 204]);
    expect(new Set(deliveries.map((d) => d.headers['webhook-id'])).size).toBe(1); // the same message, retried
  });

  it('a receiver that always fails ends the job as failed after the bounded attempts', async () => {
    const s = secret();
    const box = await inbox('down', s, -1);
    await putHook('down', { template: 'x {{ event.n }}', callback_url: box.url, secret: s, params: { max_tokens: 2 } });
    const { job_id } = (await (await sendEvent('down', s, { n: 1 })).json()) as { job_id: string };
    const done = await until(
      () => job(job_id),
      (j) => j.status === 'failed',
      'failure',
    );
    expect(done.attempts).toBe(4);
    expect(await box.deliveries()).toHaveLength(4);
  });

  it('bad signatures, stale timestamps and replays are refused; nothing runs twice', async () => {
    const s = secret();
    const box = await inbox('guarded', s);
    await putHook('guarded', {
      template: '{{ event.q }}',
      callback_url: box.url,
      secret: s,
      params: { max_tokens: 2 },
    });
    expect((await sendEvent('guarded', s, { q: 'a' }, { tamper: true })).status).toBe(401);
    expect((await sendEvent('guarded', secret(), { q: 'a' })).status).toBe(401);
    expect((await sendEvent('guarded', s, { q: 'a' }, { when: new Date(Date.now() - 10 * 60_000) })).status).toBe(401);
    const unsigned = await fetch(`${server.url}/v1/hooks/guarded`, { method: 'POST', body: '{}' });
    expect(unsigned.status).toBe(401);
    const first = await sendEvent('guarded', s, { q: 'once' }, { id: 'msg_replayed' });
    const again = await sendEvent('guarded', s, { q: 'once' }, { id: 'msg_replayed' });
    expect(first.status).toBe(202);
    expect([200, 202]).toContain(again.status);
    const a = (await first.json()) as { job_id: string };
    const b = (await again.json()) as { job_id: string };
    expect(b.job_id).toBe(a.job_id);
    await until(
      () => job(a.job_id),
      (j) => j.status === 'delivered',
      'delivery',
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await box.deliveries()).toHaveLength(1);
  });

  it('hooks need the API key; private and link-local callbacks are refused', async () => {
    const s = secret();
    expect(
      (await putHook('nokey', { template: 'x', callback_url: 'https://example.com/x', secret: s }, 'wrong')).status,
    ).toBe(401);
    for (const url of [
      'http://10.0.0.7/x',
      'https://192.168.1.1/x',
      'https://169.254.169.254/latest',
      'https://[fe80::1]/x',
      'ftp://example.com/x',
    ]) {
      const res = await putHook('private', { template: 'x', callback_url: url, secret: s });
      expect(res.status, url).toBe(400);
    }
    expect(
      (await putHook('badsecret', { template: 'x', callback_url: 'https://example.com/x', secret: 'nope' })).status,
    ).toBe(400);
    const missing = await fetch(`${server.url}/v1/jobs/0.missing`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(missing.status).toBe(404);
  });
});

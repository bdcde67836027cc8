// Webhook-triggered generation end to end: a hook is configured, a signed event arrives, the job
// generates in the background and its result is POSTed to a real receiver (Node, loopback) that checks
// the signature with the `standardwebhooks` package. Retries run from the object's alarm.
import { deliverySecret } from '../../src/objects/webhooks/delivery-key.js';
import { describe, expect, it } from 'vitest';
import { call, expectError, postJson } from './service-helpers.js';
import type { ChatCompletion, Completion } from './openai-wire.js';
import { hookName, inbox, newSecret, putHook, sendEvent, settled } from './webhook-helpers.js';

const params = { temperature: 0, max_tokens: 8 };
const template = 'Summarise the issue "{{ title }}" reported by {{ event.user.name }}.';
const event = { title: 'Crash on start', user: { name: 'ada' } };

async function setUp(fail = 0, extra: Record<string, unknown> = {}) {
  const name = hookName();
  const secret = newSecret();
  const box = await inbox(secret, fail);
  const res = await putHook(name, { template, callback_url: box.url, secret, params, ...extra });
  expect(res.status, await res.clone().text()).toBe(201);
  return { name, secret, box };
}

async function accepted(res: Response): Promise<string> {
  const text = await res.text();
  expect(res.status, text).toBe(202);
  const body = JSON.parse(text) as { job_id: string; status: string };
  expect(body.status).toBe('queued');
  return body.job_id;
}

describe('hooks', () => {
  it('configures, shows (without the secret) and deletes a hook', async () => {
    const { name, secret, box } = await setUp();
    const shown = await (await call(`/v1/hooks/${name}`)).json();
    expect(shown).toMatchObject({
      name,
      object: 'hook',
      template,
      callback_url: box.url,
      params,
      mode: 'chat',
      secret_hint: `whsec_…${secret.slice(-4)}`,
    });
    expect(JSON.stringify(shown)).not.toContain(secret.slice(6));
    // PUT again replaces it: 200, not 201.
    expect((await putHook(name, { template: 'Hi {{ title }}', callback_url: box.url, secret })).status).toBe(200);
    expect((await call(`/v1/hooks/${name}`, { method: 'DELETE' })).status).toBe(200);
    await expectError(await call(`/v1/hooks/${name}`), 404, null, 'hook_not_found');
    await expectError(await sendEvent(name, secret, event), 404, null, 'hook_not_found');
  });

  it('refuses private, link-local, non-https and malformed callback URLs at PUT', async () => {
    const secret = newSecret();
    for (const url of [
      'https://10.0.0.7/hook',
      'https://172.20.1.1/',
      'https://192.168.0.10/',
      'https://169.254.169.254/latest/meta-data',
      'https://0.0.0.0/',
      'https://[fd00::1]/',
      'https://[fe80::1]/',
      'https://[::ffff:10.0.0.1]/',
      'https://167772161/',
      'http://example.com/hook',
      'ftp://example.com/',
      'nope',
    ]) {
      await expectError(
        await putHook(hookName(), { template, callback_url: url, secret }),
        400,
        'callback_url',
        'invalid_callback_url',
      );
    }
  });

  it('refuses a bad secret, template or params', async () => {
    const base = { template, callback_url: 'https://example.com/hook', secret: newSecret() };
    await expectError(await putHook(hookName(), { ...base, secret: 'hunter2' }), 400, 'secret');
    await expectError(
      await putHook(hookName(), { ...base, template: '{% for %}' }),
      400,
      'template',
      'invalid_template',
    );
    await expectError(await putHook(hookName(), { ...base, params: { temperature: -1 } }), 400, 'params.temperature');
    await expectError(
      await putHook(hookName(), { ...base, params: { temprature: 1 } }),
      400,
      'params.temprature',
      'unknown_parameter',
    );
    await expectError(await putHook(hookName(), { ...base, template: 5 }), 400, 'template');
    await expectError(await putHook('bad name!', base), 400, 'name');
  });
});

describe('hooks cannot loop', () => {
  it("refuses a callback_url under /v1/hooks/ or at the service's own host", async () => {
    const own = await setUp();
    const self = (await (await call(`/v1/hooks/${own.name}`)).json()) as { url: string };
    for (const callback of [self.url, 'http://127.0.0.1:9/v1//Hooks/x', 'http://edge-infer.test/inbox']) {
      const res = await putHook(hookName(), { template, callback_url: callback, secret: newSecret(), params });
      await expectError(res, 400, 'callback_url', 'invalid_callback_url');
    }
  });

  it('answers a delivery_secret: what deliveries are signed with, never valid as an inbound event', async () => {
    const { name, secret } = await setUp();
    const shown = (await (await call(`/v1/hooks/${name}`)).json()) as { delivery_secret: string };
    expect(shown.delivery_secret).toBe(await deliverySecret(secret));
    expect(shown.delivery_secret).not.toBe(secret);
    // A delivery replayed to the hook as an event (signed with the delivery secret) is refused.
    await expectError(await sendEvent(name, shown.delivery_secret, event), 401, null, 'invalid_signature');
  });
});

describe('inbound events', () => {
  it('round trip: 202 with a job, generation, a signed delivery the reference package verifies', async () => {
    const { name, secret, box } = await setUp();
    const jobId = await accepted(await sendEvent(name, secret, event));
    const job = await settled(jobId);
    expect(job).toMatchObject({ id: jobId, hook: name, status: 'delivered', attempts: 1 });
    expect(job.result!.usage.completion_tokens).toBeGreaterThan(0);

    const deliveries = await box.deliveries();
    expect(deliveries).toHaveLength(1);
    expect(deliveries[0].verified).toBe(true);
    expect(deliveries[0].inboundValid, "the hook's own secret does not verify a delivery").toBe(false);
    expect(deliveries[0].headers['webhook-id']).toBe(jobId);
    expect(JSON.parse(deliveries[0].body)).toEqual({
      type: 'generation.completed',
      job_id: jobId,
      hook: name,
      output: job.result,
    });

    // The template was rendered over the event: the same prompt sent as a chat message gives the same greedy text.
    const direct = await postJson<ChatCompletion>('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Summarise the issue "Crash on start" reported by ada.' }],
      ...params,
    });
    expect(job.result!.text).toBe(direct.choices[0].message.content);
    expect(job.result!.usage.prompt_tokens).toBe(direct.usage.prompt_tokens);
  });

  it('401 for a bad or missing signature, and for a timestamp more than 5 minutes off', async () => {
    const { name, secret } = await setUp();
    await expectError(await sendEvent(name, newSecret(), event), 401, null, 'invalid_signature');
    const res = await call(`/v1/hooks/${name}`, { method: 'POST', body: JSON.stringify(event) });
    await expectError(res, 401, null, 'missing_headers');
    await expectError(
      await sendEvent(name, secret, event, { when: new Date(Date.now() - 6 * 60_000) }),
      401,
      null,
      'timestamp_out_of_range',
    );
    await expectError(
      await sendEvent(name, secret, event, { when: new Date(Date.now() + 6 * 60_000) }),
      401,
      null,
      'timestamp_out_of_range',
    );
    // Within the window is fine.
    expect((await sendEvent(name, secret, event, { when: new Date(Date.now() - 4 * 60_000) })).status).toBe(202);
  });

  it('a replayed webhook-id is answered with the same job and not run twice', async () => {
    const { name, secret, box } = await setUp();
    const first = await accepted(await sendEvent(name, secret, event, { id: 'msg_replay' }));
    const again = await sendEvent(name, secret, event, { id: 'msg_replay' });
    expect(again.status).toBe(200);
    expect(((await again.json()) as { job_id: string }).job_id).toBe(first);
    await settled(first);
    const later = await sendEvent(name, secret, { other: true }, { id: 'msg_replay' });
    expect((await later.json()) as { job_id: string; status: string }).toMatchObject({
      job_id: first,
      status: 'delivered',
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(await box.deliveries()).toHaveLength(1);
  });

  it('retries a failing receiver with backoff: fails twice, then delivered on attempt 3', async () => {
    const { name, secret, box } = await setUp(2);
    const jobId = await accepted(await sendEvent(name, secret, event));
    const job = await settled(jobId);
    expect(job).toMatchObject({ status: 'delivered', attempts: 3 });
    expect(job.last_error).toBeUndefined();
    const deliveries = await box.deliveries();
    expect(deliveries.map((d) => d.status)).toEqual([503, 503, 204]);
    expect(deliveries.every((d) => d.verified && d.headers['webhook-id'] === jobId)).toBe(true);
    // Backoff: base 20 ms in tests, equal jitter, so at least 10 ms then 20 ms between attempts.
    expect(deliveries[1].at - deliveries[0].at).toBeGreaterThanOrEqual(10);
    expect(deliveries[2].at - deliveries[1].at).toBeGreaterThanOrEqual(20);
  });

  it('gives up after WEBHOOK_MAX_ATTEMPTS on a receiver that always fails', async () => {
    const { name, secret, box } = await setUp(-1);
    const jobId = await accepted(await sendEvent(name, secret, event));
    const job = await settled(jobId);
    expect(job).toMatchObject({ status: 'failed', attempts: 4, last_error: 'callback answered HTTP 503' });
    // The generation itself succeeded: its result is kept even though no delivery landed.
    expect(job.result).toMatchObject({
      text: expect.any(String),
      finish_reason: expect.stringMatching(/^(stop|length)$/),
      usage: { completion_tokens: expect.any(Number) },
    });
    expect(await box.deliveries()).toHaveLength(4);
  });

  it('renders the template as a raw prompt in completion mode', async () => {
    const { name, secret } = await setUp(0, { mode: 'completion', template: 'Title: {{ title }}' });
    const job = await settled(await accepted(await sendEvent(name, secret, event)));
    const direct = await postJson<Completion>('/v1/completions', { prompt: 'Title: Crash on start', ...params });
    expect(job.result!.text).toBe(direct.choices[0].text);
  });
});

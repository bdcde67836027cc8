/// <reference types="@cloudflare/vitest-pool-workers/types" />
// GET /v1/jobs/:id, and jobs surviving their object: a job accepted and then cut off by a restart is
// generated and delivered when the object's alarm fires.
import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { InferenceObject } from '../../src/objects/inference-object.js';
import { call, expectError } from './service-helpers.js';
import { getJob, hookName, inbox, newSecret, putHook, sendEvent, settled } from './webhook-helpers.js';

function shardOf(id: string): DurableObjectStub<InferenceObject> {
  const ns = (env as unknown as Cloudflare.Env).INFERENCE;
  return ns.get(ns.idFromName(`shard-${id.split('.')[0]}`));
}

async function hookWith(params: Record<string, unknown>, fail = 0) {
  const name = hookName('job');
  const secret = newSecret();
  const box = await inbox(secret, fail);
  expect(
    (await putHook(name, { template: 'Event: {{ event | tojson }}', callback_url: box.url, secret, params })).status,
  ).toBe(201);
  return { name, secret, box };
}

describe('GET /v1/jobs/:id', () => {
  it('shows status, attempts, result and timestamps', async () => {
    const { name, secret } = await hookWith({ temperature: 0, max_tokens: 4 });
    const res = await sendEvent(name, secret, { n: 1 });
    const { job_id } = (await res.json()) as { job_id: string };
    const early = await getJob(job_id);
    expect(['queued', 'running', 'delivering', 'delivered']).toContain(early.status);
    const job = await settled(job_id);
    expect(job).toEqual({
      id: job_id,
      object: 'job',
      hook: name,
      // The hook's path id and the key the job's usage is counted under (dev mode: the anonymous one).
      hook_id: expect.stringMatching(/^hk_\d+\.[0-9a-f]{24}$/),
      key_name: 'anonymous',
      status: 'delivered',
      attempts: 1,
      result: {
        text: expect.any(String),
        finish_reason: expect.stringMatching(/^(stop|length)$/),
        usage: {
          prompt_tokens: expect.any(Number),
          completion_tokens: expect.any(Number),
          total_tokens: expect.any(Number),
          prompt_tokens_details: { cached_tokens: expect.any(Number) },
        },
      },
      created_at: expect.any(Number),
      updated_at: expect.any(Number),
    });
  });

  it('404 for unknown and malformed ids', async () => {
    await expectError(await call('/v1/jobs/0.0123456789abcdef01234567'), 404, null, 'job_not_found');
    await expectError(await call('/v1/jobs/nonsense'), 404, null, 'job_not_found');
  });

  it('a generation that cannot run is delivered as generation.failed', async () => {
    const { name, secret, box } = await hookWith({ max_tokens: 2047 });
    const res = await sendEvent(name, secret, { text: 'x'.repeat(50) });
    const { job_id } = (await res.json()) as { job_id: string };
    const job = await settled(job_id);
    expect(job.status).toBe('delivered');
    expect(job.error).toMatchObject({ code: 'context_length_exceeded' });
    const [delivery] = await box.deliveries();
    expect(JSON.parse(delivery.body)).toMatchObject({
      type: 'generation.failed',
      job_id,
      hook: name,
      error: { code: 'context_length_exceeded' },
    });
  });
});

describe('jobs across restarts', () => {
  it('a job cut off by a restart is generated and delivered from the alarm, once', async () => {
    const { name, secret, box } = await hookWith({ temperature: 0, max_tokens: 1500, ignore_eos: true });
    const res = await sendEvent(name, secret, { long: true });
    expect(res.status).toBe(202);
    const { job_id } = (await res.json()) as { job_id: string };
    await abortAllDurableObjects();

    const stored = await getJob(job_id);
    expect(['queued', 'running']).toContain(stored.status);
    // The watchdog alarm was set before the 202; fire it now rather than in a minute.
    const stub = shardOf(job_id);
    expect(await runInDurableObject(stub, (_o, state) => state.storage.getAlarm())).not.toBeNull();
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const job = await settled(job_id);
    expect(job).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(job.result!.usage.completion_tokens).toBe(1500);
    const deliveries = await box.deliveries();
    expect(deliveries).toHaveLength(1);
    expect(deliveries[0].verified).toBe(true);
    // Nothing left to do: the alarm is cleared.
    expect(await runInDurableObject(stub, (_o, state) => state.storage.getAlarm())).toBeNull();
  });
});

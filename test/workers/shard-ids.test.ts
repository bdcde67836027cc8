/// <reference types="@cloudflare/vitest-pool-workers/types" />
// Ids name their shard, and the shard a request names is the Durable Object it starts: a forged id must
// start nothing, and an unknown (well-formed) id must be a 404 from storage, never a model load.
import { abortAllDurableObjects, listDurableObjectIds, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { Env } from '../../src/env.js';
import type { InferenceObject } from '../../src/objects/inference-object.js';
import { issuedShard, issueId } from '../../src/worker/shard-ids.js';
import { call, expectError, post } from './service-helpers.js';

const ns = (env as unknown as Cloudflare.Env).INFERENCE;
const shard = (n: number): DurableObjectStub<InferenceObject> => ns.get(ns.idFromName(`shard-${n}`));
const started = async (n: number): Promise<boolean> => {
  const id = ns.idFromName(`shard-${n}`).toString();
  return (await listDurableObjectIds(ns)).some((x) => x.toString() === id);
};
const engineLoaded = (n: number): Promise<boolean> =>
  runInDurableObject(shard(n), (instance) => (instance as unknown as { loaded?: unknown }).loaded !== undefined);

const vars = (extra: Partial<Env>): Env => ({ SHARD_COUNT: '2', ...extra }) as Env;

describe('shard ids', () => {
  it('an unknown session on a real shard is a 404 without loading the model', async () => {
    await abortAllDurableObjects();
    await expectError(
      await post('/v1/sessions/1.0123456789abcdef01234567/messages', { content: 'hi' }),
      404,
      null,
      'session_not_found',
    );
    await expectError(await call('/v1/sessions/1.0123456789abcdef01234567'), 404, null, 'session_not_found');
    await expectError(await call('/v1/jobs/1.0123456789abcdef01234567'), 404, null, 'job_not_found');
    expect(await engineLoaded(1)).toBe(false);
  });

  it('an id naming a shard never issued starts no object', async () => {
    await expectError(
      await post('/v1/sessions/999999.abcdefgh/messages', { content: 'hi' }),
      404,
      null,
      'session_not_found',
    );
    await expectError(await call('/v1/sessions/999999.abcdefgh'), 404, null, 'session_not_found');
    await expectError(await call('/v1/sessions/999999.abcdefgh', { method: 'DELETE' }), 404, null, 'session_not_found');
    await expectError(await call('/v1/jobs/999998.abcdefgh'), 404, null, 'job_not_found');
    expect(await started(999999)).toBe(false);
    expect(await started(999998)).toBe(false);
  });

  it('unsigned ids are bounded by SHARD_COUNT', async () => {
    expect(await issuedShard(vars({}), '1.abcdefgh')).toBe(1);
    expect(await issuedShard(vars({}), '2.abcdefgh')).toBeNull();
    expect(await issuedShard(vars({}), 'x.abcdefgh')).toBeNull();
    expect(await issuedShard(vars({}), await issueId(vars({}), 1))).toBe(1);
  });

  it('a signed id keeps its shard after SHARD_COUNT shrinks; a forged or re-keyed one does not', async () => {
    const id = await issueId(vars({ SHARD_COUNT: '8', ID_SECRET: 'k1' }), 5);
    expect(id).toMatch(/^5\.[0-9a-f]{40}$/);
    expect(await issuedShard(vars({ ID_SECRET: 'k1' }), id)).toBe(5);
    expect(await issuedShard(vars({ ID_SECRET: 'k2' }), id)).toBeNull();
    expect(await issuedShard(vars({}), id)).toBeNull();
    const flipped = id.slice(0, -1) + (id.endsWith('0') ? '1' : '0');
    expect(await issuedShard(vars({ ID_SECRET: 'k1' }), flipped)).toBeNull();
    // Moving a valid tag onto another shard number does not carry it there.
    expect(await issuedShard(vars({ ID_SECRET: 'k1' }), `6${id.slice(1)}`)).toBeNull();
  });
});

// The object's one admission path for generations (generate, session turns, responses): the queue's room,
// then the key's rate limits, then the launch, then the limiter settled with what it generated.
import { describe, expect, it } from 'vitest';
import { GenerationAdmission } from '../src/objects/generation-admission.js';
import { fail, ok, type RpcResult } from '../src/objects/rpc-error.js';
import { rateLimitConfig } from '../src/objects/tenancy/rate-limit-config.js';
import { RateLimiter } from '../src/objects/tenancy/rate-limiter.js';
import type { Caller } from '../src/objects/tenancy/tenant.js';

/** An engine's queue as admission reads it: `waiting` sequences of each owner. */
const queue = (waiting: Record<string, number> = {}) => ({
  waitingByGroup: () => new Map<string | undefined, number>(Object.entries(waiting)),
});

const caller = (limits: string): Caller => ({
  tenant: { owner: 'owner-a', name: 'alice', legacy: false },
  limits: { config: rateLimitConfig(limits), shard: 0, shards: 1 },
});

describe('generation admission', () => {
  it('launches within the limits, reports them, and frees the slot when the generation settles', async () => {
    const limiter = new RateLimiter();
    const admission = new GenerationAdmission(limiter, () => 8);
    let settle: ((tokens: number) => void) | undefined;
    const result = await admission.generation(ok(queue()), caller('{"alice":{"concurrent":1}}'), 1, async (_, s) => {
      settle = s;
      return ok({});
    });
    expect(result).toMatchObject({ ok: true, value: { started: true } });
    expect(limiter.snapshot().alice.inFlight).toBe(1);
    settle?.(5);
    expect(limiter.snapshot().alice).toMatchObject({ inFlight: 0, windowTokens: 5 });
  });

  it('passes the launch its reasoning format, and says no rate limit where the key has none', async () => {
    const admission = new GenerationAdmission(new RateLimiter(), () => 8);
    const reasoning = { begin: '<think>', end: '</think>', startsInside: false };
    const result = await admission.generation(ok(queue()), caller(''), 1, async () => ok({ reasoning }));
    expect(result).toEqual({ ok: true, value: { started: true, reasoning } });
  });

  it('refuses a key past its share of the queue while others wait with a 429, and launches nothing', async () => {
    const admission = new GenerationAdmission(new RateLimiter(), () => 2);
    let launched = false;
    const result = await admission.generation(ok(queue({ other: 2, 'owner-a': 1 })), caller(''), 1, async () => {
      launched = true;
      return ok({});
    });
    expect(result).toMatchObject({ ok: false, error: { status: 429, code: 'queue_share_exceeded' } });
    expect(launched).toBe(false);
  });

  it("refuses past the key's limit with a 429 naming it, and launches nothing", async () => {
    const limiter = new RateLimiter();
    const admission = new GenerationAdmission(limiter, () => 8);
    const who = caller('{"alice":{"concurrent":1}}');
    await admission.generation(ok(queue()), who, 1, async () => ok({}));
    let launched = false;
    const result = await admission.generation(ok(queue()), who, 1, async () => {
      launched = true;
      return ok({});
    });
    expect(result).toMatchObject({ ok: false, error: { status: 429, code: 'concurrency_limit_exceeded' } });
    expect(launched).toBe(false);
    expect(limiter.snapshot().alice.refused.concurrent).toBe(1);
  });

  it('settles a refused launch with no tokens (its slot is freed) and returns its error', async () => {
    const limiter = new RateLimiter();
    const admission = new GenerationAdmission(limiter, () => 8);
    const refusal: RpcResult<never> = fail({
      status: 400,
      type: 'invalid_request_error',
      message: 'no',
      param: 'x',
      code: null,
    });
    const result = await admission.generation(
      ok(queue()),
      caller('{"alice":{"concurrent":1}}'),
      1,
      async () => refusal,
    );
    expect(result).toBe(refusal);
    expect(limiter.snapshot().alice).toMatchObject({ inFlight: 0, windowTokens: 0 });
  });

  it("passes the engine's own failure through without counting anything", async () => {
    const limiter = new RateLimiter();
    const admission = new GenerationAdmission(limiter, () => 8);
    const down: RpcResult<ReturnType<typeof queue>> = fail({
      status: 503,
      type: 'server_error',
      message: 'down',
      param: null,
      code: 'model_unavailable',
    });
    const result = await admission.generation(down, caller(''), 1, async () => ok({}));
    expect(result).toBe(down);
    expect(limiter.snapshot()).toEqual({});
  });
});

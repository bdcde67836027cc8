// Per-key limits on their own: RATE_LIMITS parsing, the per-shard shares (which sum to the limit), the
// sliding windows of a shard's limiter, and the x-ratelimit-* headers they become.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  RateLimitConfigError,
  rateLimitConfig,
  shardQuota,
  shardShare,
} from '../src/objects/tenancy/rate-limit-config.js';
import { RateLimiter, WINDOW_MS } from '../src/objects/tenancy/rate-limiter.js';
import { duration, rateLimitHeaders } from '../src/worker/rate-limit-headers.js';

describe('RATE_LIMITS', () => {
  it('a default and per-key overrides, field by field; unset limits nothing', () => {
    const config = rateLimitConfig('{"default":{"rpm":600,"tpm":200000,"concurrent":16},"alice":{"rpm":60}}');
    expect(shardQuota({ config: config, shard: 0, shards: 1 }, 'alice')).toEqual({
      rpm: 60,
      tpm: 200_000,
      concurrent: 16,
    });
    expect(shardQuota({ config: config, shard: 0, shards: 1 }, 'bob')).toEqual({
      rpm: 600,
      tpm: 200_000,
      concurrent: 16,
    });
    expect(shardQuota({ config: rateLimitConfig(''), shard: 0, shards: 2 }, 'alice')).toEqual({});
    expect(shardQuota({ config: rateLimitConfig(undefined), shard: 0, shards: 2 }, 'alice')).toEqual({});
    // null lifts a default for one key.
    expect(
      shardQuota({ config: rateLimitConfig('{"default":{"rpm":5},"ops":{"rpm":null}}'), shard: 0, shards: 1 }, 'ops'),
    ).toEqual({});
  });

  it('refuses what it cannot read, naming the field', () => {
    for (const [raw, what] of [
      ['nope', 'JSON object'],
      ['[1]', 'JSON object'],
      ['{"alice":5}', 'RATE_LIMITS.alice'],
      ['{"alice":{"rps":5}}', 'RATE_LIMITS.alice.rps'],
      ['{"default":{"rpm":0}}', 'RATE_LIMITS.default.rpm'],
      ['{"default":{"tpm":1.5}}', 'RATE_LIMITS.default.tpm'],
      ['{"default":{"concurrent":"4"}}', 'RATE_LIMITS.default.concurrent'],
    ]) {
      expect(() => rateLimitConfig(raw), raw).toThrow(RateLimitConfigError);
      expect(() => rateLimitConfig(raw), raw).toThrow(what);
    }
  });

  it("shards' shares sum to the limit (or to the shard count, when the limit is smaller), each at least 1", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: 1, max: 64 }), (limit, shards) => {
        const shares = Array.from({ length: shards }, (_, s) => shardShare(limit, s, shards));
        expect(shares.every((x) => x >= 1)).toBe(true);
        expect(shares.reduce((a, b) => a + b, 0)).toBe(Math.max(limit, shards));
        expect(Math.max(...shares) - Math.min(...shares)).toBeLessThanOrEqual(1);
      }),
    );
    expect([0, 1].map((s) => shardShare(3, s, 2))).toEqual([2, 1]);
    // A shard past SHARD_COUNT (a signed id after it shrank) gets the base share.
    expect(shardShare(3, 5, 2)).toBe(1);
  });
});

describe('a shard limiter', () => {
  const clock = () => {
    let now = 1_000_000;
    return { now: () => now, advance: (ms: number) => (now += ms) };
  };

  it('admits rpm requests in any 60 s window, says when the next fits, and reports what is left', () => {
    const t = clock();
    const limiter = new RateLimiter(t.now);
    const quota = { rpm: 3 };
    const first = limiter.admit('alice', quota);
    expect(first.ok && first.state.requests).toEqual({ limit: 3, remaining: 2, resetMs: WINDOW_MS });
    t.advance(10_000);
    limiter.admit('alice', quota);
    t.advance(10_000);
    const third = limiter.admit('alice', quota);
    expect(third.ok && third.state.requests?.remaining).toBe(0);
    t.advance(5_000);
    const refused = limiter.admit('alice', quota);
    expect(refused).toMatchObject({ ok: false, refused: 'requests', limit: 3 });
    // The first request leaves the window 60 s after it came, 35 s from now.
    expect(!refused.ok && refused.state.retryAfterMs).toBe(35_000);
    // Another key is not affected.
    expect(limiter.admit('bob', quota).ok).toBe(true);
    t.advance(35_000);
    expect(limiter.admit('alice', quota).ok).toBe(true);
    expect(limiter.snapshot().alice).toMatchObject({ windowRequests: 3, refused: { requests: 1 } });
  });

  it('charges generated tokens when a request ends, and refuses while the window holds tpm of them', () => {
    const t = clock();
    const limiter = new RateLimiter(t.now);
    const quota = { tpm: 10 };
    const a = limiter.admit('k', quota);
    const b = limiter.admit('k', quota);
    if (!a.ok || !b.ok) throw new Error('refused');
    // Both ran at once: the second was admitted before the first's tokens were charged, so the window may pass tpm.
    a.ticket.settle(8);
    b.ticket.settle(8);
    const refused = limiter.admit('k', quota);
    expect(refused).toMatchObject({ ok: false, refused: 'tokens' });
    expect(!refused.ok && refused.state.tokens).toEqual({ limit: 10, remaining: 0, resetMs: WINDOW_MS });
    // Below tpm once the first 8 leave the window.
    expect(!refused.ok && refused.state.retryAfterMs).toBe(WINDOW_MS);
    t.advance(WINDOW_MS);
    expect(limiter.admit('k', quota).ok).toBe(true);
  });

  it('counts requests in flight against concurrent; a settled or refunded ticket frees its slot, once', () => {
    const limiter = new RateLimiter(clock().now);
    const quota = { concurrent: 2, rpm: 5 };
    const a = limiter.admit('k', quota);
    const b = limiter.admit('k', quota);
    expect(limiter.admit('k', quota)).toMatchObject({ ok: false, refused: 'concurrent', limit: 2 });
    if (!a.ok || !b.ok) throw new Error('refused');
    a.ticket.settle(0);
    a.ticket.settle(0);
    expect(limiter.snapshot().k.inFlight).toBe(1);
    // A refunded request (refused by validation) is as if never admitted: its rpm count goes too.
    b.ticket.refund();
    expect(limiter.snapshot().k).toMatchObject({ inFlight: 0, windowRequests: 1 });
  });
});

describe('x-ratelimit-* headers', () => {
  it("OpenAI's names, Go-style durations, and retry-after on a refusal", () => {
    expect(
      rateLimitHeaders({
        requests: { limit: 60, remaining: 0, resetMs: 59_500 },
        tokens: { limit: 1000, remaining: 400, resetMs: 360_000 },
        retryAfterMs: 1_200,
      }),
    ).toEqual({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '59.5s',
      'x-ratelimit-limit-tokens': '1000',
      'x-ratelimit-remaining-tokens': '400',
      'x-ratelimit-reset-tokens': '6m0s',
      'retry-after': '2',
      'retry-after-ms': '1200',
    });
    expect(rateLimitHeaders({})).toEqual({});
    expect(rateLimitHeaders(undefined)).toEqual({});
    expect([0, 17, 1000, 61_250].map(duration)).toEqual(['0s', '17ms', '1s', '1m1.25s']);
  });
});

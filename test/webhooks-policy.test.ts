// Callback URL policy (SSRF guard) and retry backoff bounds.
import { describe, expect, it } from 'vitest';
import { checkCallbackUrl, parseIpv6 } from '../src/objects/webhooks/callback-url.js';
import { retryDelayBounds, retryDelayMs, retryPolicyFromEnv } from '../src/objects/webhooks/backoff.js';

const prod = { allowLoopback: false };
const dev = { allowLoopback: true };
const ok = (url: string, policy = prod) => checkCallbackUrl(url, policy).ok;

describe('callback URLs', () => {
  it('accepts public https URLs', () => {
    for (const url of [
      'https://example.com/hook',
      'https://api.example.org:8443/x?y=1',
      'https://8.8.8.8/',
      'https://[2606:4700::1111]/',
      'https://172.32.0.1/',
      'https://11.0.0.1/',
    ]) {
      expect(ok(url), url).toBe(true);
    }
  });

  it('refuses http, other schemes, credentials and junk', () => {
    for (const url of [
      'http://example.com/',
      'ftp://example.com/',
      'https://user:pw@example.com/',
      'not a url',
      '',
      'https://intranet/',
      'https://metadata.google.internal/',
      'https://printer.local/',
    ]) {
      expect(ok(url), url).toBe(false);
    }
    expect(checkCallbackUrl(42, prod).ok).toBe(false);
  });

  it('refuses private, link-local, unspecified and reserved IPv4 in any spelling', () => {
    const urls = [
      'https://10.1.2.3/',
      'https://172.16.0.1/',
      'https://172.31.255.255/',
      'https://192.168.1.1/',
      'https://169.254.169.254/latest/meta-data',
      'https://0.0.0.0/',
      'https://100.64.0.1/',
      'https://224.0.0.1/',
      'https://255.255.255.255/',
      'https://167772161/',
      'https://0xa.0.0.1/',
      'https://012.0.0.1/',
      'https://0xA9FEA9FE/',
      'https://10.1/',
    ];
    for (const url of urls) expect(ok(url), url).toBe(false);
  });

  it('refuses private, link-local and mapped IPv6', () => {
    const urls = [
      'https://[::]/',
      'https://[fc00::1]/',
      'https://[fd12:3456::1]/',
      'https://[fe80::1]/',
      'https://[febf::1]/',
      'https://[::ffff:10.0.0.1]/',
      'https://[::ffff:169.254.169.254]/',
      'https://[::ffff:a00:1]/',
      'https://[64:ff9b::a00:1]/',
      'https://[2002:c0a8:101::1]/',
      'https://[ff02::1]/',
      'https://[fe80::1%25eth0]/',
    ];
    for (const url of urls) expect(ok(url), url).toBe(false);
  });

  it('allows loopback only in dev, over http or https', () => {
    const loopbacks = [
      'http://127.0.0.1:9999/cb',
      'https://127.0.0.1/',
      'http://127.1.2.3/',
      'http://localhost:8080/',
      'http://LOCALHOST./',
      'http://[::1]:9/',
      'http://2130706433/',
      'http://[::ffff:127.0.0.1]/',
      'http://a.localhost/',
    ];
    for (const url of loopbacks) {
      expect(ok(url, prod), url).toBe(false);
      expect(ok(url, dev), url).toBe(true);
    }
    // Dev loosens loopback only.
    expect(ok('http://example.com/', dev)).toBe(false);
    expect(ok('http://10.0.0.1/', dev)).toBe(false);
  });

  it('refuses IPv4-translated (::ffff:0:0/96) and local-use NAT64 (64:ff9b:1::/48) addresses', () => {
    for (const url of [
      'https://[::ffff:0:7f00:1]/',
      'https://[::ffff:0:a9fe:a9fe]/',
      'https://[::ffff:0:10.0.0.1]/',
      'https://[64:ff9b:1::a9fe:a9fe]/',
      'https://[64:ff9b:1::808:808]/',
    ])
      expect(ok(url), url).toBe(false);
    expect(ok('http://[::ffff:0:7f00:1]:8787/', dev), 'translated 127.0.0.1 is loopback, allowed in dev').toBe(true);
    // Public addresses in the well-known NAT64 prefix stay allowed.
    expect(ok('https://[64:ff9b::808:808]/')).toBe(true);
  });

  it('strips every trailing dot before judging a host', () => {
    for (const url of [
      'https://localhost../',
      'https://printer.local../',
      'https://intranet.../',
      'https://10.0.0.1../',
    ])
      expect(ok(url), url).toBe(false);
    expect(ok('https://example.com../')).toBe(true);
  });

  it("refuses inbound hook paths on every host, and the service's own host", () => {
    for (const url of [
      'https://example.com/v1/hooks/hk_0.abc',
      'https://example.com//v1//HOOKS/x',
      'https://example.com/v1/%68ooks/x',
      'https://example.com/a/../v1/hooks/x',
      'https://example.com/v1/hooks',
    ])
      expect(ok(url), url).toBe(false);
    expect(ok('https://example.com/v1/hooksmith')).toBe(true);
    const self = { allowLoopback: true, selfHost: '127.0.0.1:8787' };
    expect(checkCallbackUrl('http://127.0.0.1:8787/inbox', self).ok).toBe(false);
    expect(checkCallbackUrl('http://127.0.0.1:9999/inbox', self).ok).toBe(true);
    const deployed = { allowLoopback: false, selfHost: 'edge.example.com' };
    expect(checkCallbackUrl('https://edge.example.com./inbox', deployed).ok).toBe(false);
    expect(checkCallbackUrl('https://EDGE.example.com:443/x', deployed).ok).toBe(false);
    expect(checkCallbackUrl('https://other.example.com/x', deployed).ok).toBe(true);
  });

  it('parses IPv6 forms', () => {
    expect(parseIpv6('::1')).toEqual([0, 0, 0, 0, 0, 0, 0, 1]);
    expect(parseIpv6('1:2:3:4:5:6:7:8')).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(parseIpv6('::ffff:1.2.3.4')).toEqual([0, 0, 0, 0, 0, 0xffff, 0x0102, 0x0304]);
    expect(parseIpv6('fe80::')).toEqual([0xfe80, 0, 0, 0, 0, 0, 0, 0]);
    expect(parseIpv6('1::2::3')).toBeNull();
    expect(parseIpv6('1:2:3')).toBeNull();
    expect(parseIpv6('12345::')).toBeNull();
  });
});

describe('retry backoff', () => {
  const policy = { baseMs: 1000, maxAttempts: 6, maxDelayMs: 10_000 };

  it('doubles per attempt, within [nominal/2, nominal], capped', () => {
    expect(retryDelayBounds(1, policy)).toEqual([500, 1000]);
    expect(retryDelayBounds(2, policy)).toEqual([1000, 2000]);
    expect(retryDelayBounds(4, policy)).toEqual([4000, 8000]);
    expect(retryDelayBounds(10, policy)).toEqual([5000, 10_000]);
    for (let failed = 1; failed <= 8; failed++) {
      const [lo, hi] = retryDelayBounds(failed, policy);
      expect(retryDelayMs(failed, policy, () => 0)).toBe(lo);
      expect(retryDelayMs(failed, policy, () => 0.999999)).toBe(hi);
      for (let i = 0; i < 50; i++) {
        const d = retryDelayMs(failed, policy);
        expect(d).toBeGreaterThanOrEqual(lo);
        expect(d).toBeLessThanOrEqual(hi);
      }
    }
  });

  it('jitters: delays for one attempt differ', () => {
    const seen = new Set(Array.from({ length: 20 }, () => retryDelayMs(3, policy)));
    expect(seen.size).toBeGreaterThan(5);
  });

  it('reads vars as strings, with defaults for missing or bad values', () => {
    expect(retryPolicyFromEnv({})).toMatchObject({ baseMs: 2000, maxAttempts: 6 });
    expect(retryPolicyFromEnv({ WEBHOOK_RETRY_BASE_MS: '25', WEBHOOK_MAX_ATTEMPTS: '3' })).toMatchObject({
      baseMs: 25,
      maxAttempts: 3,
    });
    expect(retryPolicyFromEnv({ WEBHOOK_RETRY_BASE_MS: 'x', WEBHOOK_MAX_ATTEMPTS: '0' })).toMatchObject({
      baseMs: 2000,
      maxAttempts: 6,
    });
  });
});

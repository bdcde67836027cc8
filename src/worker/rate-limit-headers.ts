import type { RateLimitState } from '../objects/tenancy/rate-limiter.js';

/**
 * OpenAI's rate-limit headers for a key's limits on the shard that answered: x-ratelimit-limit-*,
 * x-ratelimit-remaining-* and x-ratelimit-reset-* for requests and tokens (only those limits that are
 * set), and on a 429 retry-after (whole seconds) with retry-after-ms, which the openai SDKs read first.
 */
export function rateLimitHeaders(state: RateLimitState | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  if (!state) return headers;
  for (const kind of ['requests', 'tokens'] as const) {
    const limit = state[kind];
    if (!limit) continue;
    headers[`x-ratelimit-limit-${kind}`] = String(limit.limit);
    headers[`x-ratelimit-remaining-${kind}`] = String(limit.remaining);
    headers[`x-ratelimit-reset-${kind}`] = duration(limit.resetMs);
  }
  if (state.retryAfterMs !== undefined) {
    const ms = Math.max(1, Math.ceil(state.retryAfterMs));
    headers['retry-after'] = String(Math.ceil(ms / 1000));
    headers['retry-after-ms'] = String(ms);
  }
  return headers;
}

/** A duration as OpenAI writes resets (Go's spelling): `0s`, `250ms`, `1.5s`, `6m0s`. */
export function duration(ms: number): string {
  const whole = Math.max(0, Math.round(ms));
  if (whole === 0) return '0s';
  if (whole < 1000) return `${whole}ms`;
  const seconds = (n: number): string => `${Number((n / 1000).toFixed(3))}s`;
  if (whole < 60_000) return seconds(whole);
  return `${Math.floor(whole / 60_000)}m${seconds(whole % 60_000)}`;
}

/** Sets the headers of `state` on a response the worker built (streams and JSON alike). */
export function withRateLimitHeaders(res: Response, state: RateLimitState | undefined): Response {
  for (const [name, value] of Object.entries(rateLimitHeaders(state))) res.headers.set(name, value);
  return res;
}

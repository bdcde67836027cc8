/**
 * When to retry a failed delivery: exponential backoff with "equal jitter" (half the delay fixed, half
 * random), so retries after an outage spread out instead of arriving together, yet never come sooner
 * than half the nominal delay. Attempt n (1-based) that failed waits about base * 2^(n-1).
 */

export interface RetryPolicy {
  /** Nominal delay after the first failed attempt, ms. */
  baseMs: number;
  /** Attempts in all, the first included; after the last failure the job is failed. */
  maxAttempts: number;
  /** No single wait is longer than this. */
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { baseMs: 2000, maxAttempts: 6, maxDelayMs: 60 * 60 * 1000 };

/** Delay before attempt `failed + 1`, given that attempt `failed` (>= 1) just failed. `random` in [0, 1). */
export function retryDelayMs(failed: number, policy: RetryPolicy, random: () => number = Math.random): number {
  const nominal = Math.min(policy.maxDelayMs, policy.baseMs * 2 ** Math.max(0, failed - 1));
  return Math.round(nominal / 2 + random() * (nominal / 2));
}

/** The bounds retryDelayMs stays within, for tests and docs. */
export function retryDelayBounds(failed: number, policy: RetryPolicy): [number, number] {
  const nominal = Math.min(policy.maxDelayMs, policy.baseMs * 2 ** Math.max(0, failed - 1));
  return [Math.round(nominal / 2), Math.round(nominal)];
}

/** Reads the policy from the worker's vars (strings), falling back to the defaults for missing or bad values. */
export function retryPolicyFromEnv(env: {
  WEBHOOK_RETRY_BASE_MS?: unknown;
  WEBHOOK_MAX_ATTEMPTS?: unknown;
}): RetryPolicy {
  const int = (v: unknown, fallback: number, min: number): number => {
    const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
    return Number.isSafeInteger(n) && n >= min ? n : fallback;
  };
  return {
    baseMs: int(env.WEBHOOK_RETRY_BASE_MS, DEFAULT_RETRY.baseMs, 1),
    maxAttempts: int(env.WEBHOOK_MAX_ATTEMPTS, DEFAULT_RETRY.maxAttempts, 1),
    maxDelayMs: DEFAULT_RETRY.maxDelayMs,
  };
}

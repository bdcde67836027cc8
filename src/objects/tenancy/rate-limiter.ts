/**
 * One shard's count of each key's use, against its share of the key's limits (rate-limit-config.ts):
 * requests admitted in the last 60 s, tokens generated in the last 60 s, and requests in flight. In the
 * object's memory only: an evicted or restarted object starts counting afresh.
 *
 * Guarantees, per shard and key: no more than `rpm` requests are admitted in any 60 s window; no request
 * is admitted while the tokens charged in the last 60 s reach `tpm` (tokens are charged when a request
 * finishes, so requests already running may take the window past it, by at most what they generate);
 * no more than `concurrent` requests are in flight. A refused request changes nothing but its counter.
 */
import type { Quota } from './rate-limit-config.js';

export const WINDOW_MS = 60_000;

export type LimitKind = 'requests' | 'tokens' | 'concurrent';

/** A limit's state as the x-ratelimit-* headers describe it (only for limits that are set). */
export interface LimitState {
  limit: number;
  remaining: number;
  /** Until the window is back to its full allowance (the newest entry in it expires). */
  resetMs: number;
}

export interface RateLimitState {
  requests?: LimitState;
  tokens?: LimitState;
  /** On a refusal: when a retry could be admitted. */
  retryAfterMs?: number;
}

/** An admitted request's hold on its key's counts: settle it when the request ends, or refund it if it never ran. */
export interface Ticket {
  /** The request ended, having generated `completionTokens`: its concurrency slot is freed and its tokens charged. */
  settle(completionTokens: number): void;
  /** The request never ran (refused by validation): as if it had not been admitted. */
  refund(): void;
}

export type Admission =
  | { ok: true; ticket: Ticket; state: RateLimitState }
  | { ok: false; refused: LimitKind; limit: number; state: RateLimitState };

export interface KeyCounts {
  inFlight: number;
  windowRequests: number;
  windowTokens: number;
  refused: Record<LimitKind, number>;
}

class KeyWindow {
  /** Admission times of requests in the window, oldest first. */
  readonly requests: number[] = [];
  /** Tokens charged in the window, oldest first. */
  readonly tokens: { at: number; count: number }[] = [];
  tokenSum = 0;
  inFlight = 0;
  readonly refused: Record<LimitKind, number> = { requests: 0, tokens: 0, concurrent: 0 };

  prune(now: number): void {
    const since = now - WINDOW_MS;
    let r = 0;
    while (r < this.requests.length && this.requests[r] <= since) r++;
    if (r > 0) this.requests.splice(0, r);
    let t = 0;
    while (t < this.tokens.length && this.tokens[t].at <= since) this.tokenSum -= this.tokens[t++].count;
    if (t > 0) this.tokens.splice(0, t);
  }

  state(quota: Quota, now: number): RateLimitState {
    const state: RateLimitState = {};
    if (quota.rpm !== undefined) {
      const newest = this.requests.at(-1);
      state.requests = {
        limit: quota.rpm,
        remaining: Math.max(0, quota.rpm - this.requests.length),
        resetMs: newest === undefined ? 0 : newest + WINDOW_MS - now,
      };
    }
    if (quota.tpm !== undefined) {
      const newest = this.tokens.at(-1);
      state.tokens = {
        limit: quota.tpm,
        remaining: Math.max(0, quota.tpm - this.tokenSum),
        resetMs: newest === undefined ? 0 : newest.at + WINDOW_MS - now,
      };
    }
    return state;
  }

  /** Until the tokens in the window fall below `tpm`. */
  tokensFreeInMs(tpm: number, now: number): number {
    let sum = this.tokenSum;
    for (const { at, count } of this.tokens) {
      sum -= count;
      if (sum < tpm) return at + WINDOW_MS - now;
    }
    return 0;
  }
}

export class RateLimiter {
  private readonly keys = new Map<string, KeyWindow>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Admits a request of key `name` under `quota` (this shard's share), or says which limit refuses it. */
  admit(name: string, quota: Quota): Admission {
    const now = this.now();
    const key = this.window(name, now);
    const refuse = (refused: LimitKind, limit: number, retryAfterMs: number): Admission => {
      key.refused[refused]++;
      return {
        ok: false,
        refused,
        limit,
        state: { ...key.state(quota, now), retryAfterMs: Math.max(1, retryAfterMs) },
      };
    };
    // A slot frees when some request of the key ends, which nobody can say; a second is a fair guess.
    if (quota.concurrent !== undefined && key.inFlight >= quota.concurrent)
      return refuse('concurrent', quota.concurrent, 1000);
    if (quota.rpm !== undefined && key.requests.length >= quota.rpm)
      return refuse('requests', quota.rpm, key.requests[key.requests.length - quota.rpm] + WINDOW_MS - now);
    if (quota.tpm !== undefined && key.tokenSum >= quota.tpm)
      return refuse('tokens', quota.tpm, key.tokensFreeInMs(quota.tpm, now));

    key.requests.push(now);
    key.inFlight++;
    let open = true;
    const close = (): boolean => {
      if (!open) return false;
      open = false;
      key.inFlight--;
      return true;
    };
    const ticket: Ticket = {
      settle: (completionTokens) => {
        if (close()) this.charge(name, completionTokens);
      },
      refund: () => {
        if (!close()) return;
        const at = key.requests.lastIndexOf(now);
        if (at >= 0) key.requests.splice(at, 1);
      },
    };
    return { ok: true, ticket, state: key.state(quota, now) };
  }

  /** Charges tokens a request of `name` generated (requests admitted elsewhere, e.g. a job rerun after a restart). */
  charge(name: string, completionTokens: number): void {
    if (!(completionTokens > 0)) return;
    const now = this.now();
    const key = this.window(name, now);
    key.tokens.push({ at: now, count: completionTokens });
    key.tokenSum += completionTokens;
  }

  /** Every key this shard has counted: in flight, the window's requests and tokens, refusals so far. */
  snapshot(): Record<string, KeyCounts> {
    const now = this.now();
    const out: Record<string, KeyCounts> = {};
    for (const [name, key] of this.keys) {
      key.prune(now);
      out[name] = {
        inFlight: key.inFlight,
        windowRequests: key.requests.length,
        windowTokens: key.tokenSum,
        refused: { ...key.refused },
      };
    }
    return out;
  }

  private window(name: string, now: number): KeyWindow {
    let key = this.keys.get(name);
    if (!key) {
      key = new KeyWindow();
      this.keys.set(name, key);
    }
    key.prune(now);
    return key;
  }
}

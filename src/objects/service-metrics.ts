import type { StoredUse } from './tenancy/storage-quota.js';
import type { EngineStats } from '../engine/engine-stats.js';
import type { DoneEvent } from '../engine/sequence-output.js';
import type { KvStoreUsage } from '../engine/kv/block-store.js';
import type { KeyCounts } from './tenancy/rate-limiter.js';
import { ANONYMOUS_NAME } from './tenancy/tenant.js';

/** A cumulative histogram as Prometheus exposes it: counts per upper bound (`le`), plus sum and count. */
export interface HistogramSnapshot {
  /** Upper bounds in seconds, ascending; +Inf is implied by `count`. */
  buckets: number[];
  /** Cumulative: counts[i] observations were <= buckets[i]. */
  counts: number[];
  sum: number;
  count: number;
}

class Histogram {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;
  constructor(private readonly buckets: number[]) {
    this.counts = buckets.map(() => 0);
  }

  observe(seconds: number): void {
    this.sum += seconds;
    this.count++;
    this.buckets.forEach((le, i) => {
      if (seconds <= le) this.counts[i]++;
    });
  }

  snapshot(): HistogramSnapshot {
    return { buckets: [...this.buckets], counts: [...this.counts], sum: this.sum, count: this.count };
  }
}

/** One key's use of one shard: finished requests and their tokens, and what the rate limiter counts now. */
export interface KeyStats extends Partial<KeyCounts> {
  requests: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}

/** What one shard reports to GET /metrics. `engine` is null until the shard's first request loads the model. */
export interface ShardStats {
  model: string;
  engine: EngineStats | null;
  ttftSeconds: HistogramSnapshot;
  interTokenSeconds: HistogramSnapshot;
  promptTokens: number;
  generationTokens: number;
  cachedPromptTokens: number;
  requests: Record<string, number>;
  /** Usage and limiter counts per key name (never a key). */
  keys: Record<string, KeyStats>;
  /** The shard's stored KV blocks (read from its SQLite, so known before the engine loads); absent when KV_STORE_MB is 0. */
  kvStore?: KvStoreUsage;
  /** How long the last successful model load took and where the model came from; absent before one. */
  modelLoad?: ModelLoad;
  /** What each key keeps in the shard's storage, by key name ('' for rows made before keys had names). */
  stored?: Record<string, StoredUse>;
  /** The isolate this shard runs in, once its engine is loaded: what its budget counts, and the objects sharing its weights. */
  isolate?: IsolateUse;
}

/** What an isolate's memory budget counts (weights once, every object's pool and state) and how many objects share the weights. */
export interface IsolateUse {
  countedBytes: number;
  objects: number;
}

/** One model load: config, tokenizer and weights read from `source` and placed, the KV pool made. */
export interface ModelLoad {
  seconds: number;
  source: string;
}

const TTFT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/**
 * Per-request service metrics the engine does not keep: latency histograms and finished-request counts.
 * In memory only: they restart with the object (Prometheus handles counter resets).
 */
export class ServiceMetrics {
  private readonly ttft = new Histogram(TTFT_BUCKETS);
  private readonly itl = new Histogram(ITL_BUCKETS);
  private promptTokens = 0;
  private generationTokens = 0;
  private cachedPromptTokens = 0;
  private readonly requests: Record<string, number> = {};
  private readonly keys = new Map<string, KeyStats>();
  private modelLoad: ModelLoad | undefined;

  /** The engine loaded (a later load, after a failed one, replaces the figure). */
  loaded(load: ModelLoad): void {
    this.modelLoad = load;
  }

  interToken(ms: number): void {
    this.itl.observe(ms / 1000);
  }

  /**
   * One completion finished. A request's `n` completions share one prompt and one first token's wait, so
   * prompt tokens and time to first token are counted for its first completion only (`firstOfRequest`).
   * Usage is also counted under the name of the key the request ran for.
   */
  finished(done: DoneEvent, firstOfRequest = true, keyName = ANONYMOUS_NAME): void {
    const m = done.metrics;
    const key = this.key(keyName);
    this.requests[done.finishReason] = (this.requests[done.finishReason] ?? 0) + 1;
    this.generationTokens += m.completionTokens;
    key.completionTokens += m.completionTokens;
    if (!firstOfRequest) return;
    this.promptTokens += m.promptTokens;
    this.cachedPromptTokens += m.cachedTokens;
    key.requests++;
    key.promptTokens += m.promptTokens;
    key.cachedTokens += m.cachedTokens;
    if (m.completionTokens > 0) this.ttft.observe(m.ttftMs / 1000);
  }

  private key(name: string): KeyStats {
    let stats = this.keys.get(name);
    if (!stats) {
      stats = { requests: 0, promptTokens: 0, completionTokens: 0, cachedTokens: 0 };
      this.keys.set(name, stats);
    }
    return stats;
  }

  /** `limits`: the rate limiter's counts per key, merged into the usage of the same names. */
  snapshot(
    model: string,
    engine: EngineStats | null,
    kvStore?: KvStoreUsage,
    limits: Record<string, KeyCounts> = {},
  ): ShardStats {
    const keys: Record<string, KeyStats> = {};
    for (const name of new Set([...this.keys.keys(), ...Object.keys(limits)]))
      keys[name] = { ...this.key(name), ...limits[name] };
    return {
      ...(kvStore ? { kvStore } : {}),
      ...(this.modelLoad ? { modelLoad: { ...this.modelLoad } } : {}),
      model,
      engine,
      ttftSeconds: this.ttft.snapshot(),
      interTokenSeconds: this.itl.snapshot(),
      promptTokens: this.promptTokens,
      generationTokens: this.generationTokens,
      cachedPromptTokens: this.cachedPromptTokens,
      requests: { ...this.requests },
      keys,
    };
  }
}

/// <reference types="@cloudflare/workers-types" />
import type { Engine } from '../engine/engine.js';
import type { KvBlockStore } from '../engine/kv/block-store.js';
import type { ServiceError } from './rpc-error.js';
import type { ServiceMetrics } from './service-metrics.js';
import type { RateLimiter } from './tenancy/rate-limiter.js';

/** What the object lends its session, hook and job modules: storage, the engine and the service metrics. */
export interface ShardContext {
  sql: SqlStorage;
  /** The engine, loading it if needed. */
  engine(): Promise<Engine>;
  /** The engine if it is loaded already (for work that should not trigger a model load). */
  loadedEngine(): Engine | undefined;
  metrics: ServiceMetrics;
  /** Each key's use of this shard, against its rate limits. */
  limiter: RateLimiter;
  /**
   * The prefix-cache salt of `owner`'s requests: the owner itself (one key never learns from cached_tokens or
   * timing what another sent), or undefined when SHARED_PREFIX_CACHE lets every key share cached prefixes.
   */
  cacheSalt(owner: string): string | undefined;
  /** The 503 for a model load that failed with `err` (model-unavailable.ts). */
  unavailable(err: unknown): ServiceError;
  /** The model this shard serves. */
  model: string;
  /** Where the engine keeps full KV blocks between object lifetimes (undefined when KV_STORE_MB is 0). */
  kvStore: KvBlockStore | undefined;
}

/**
 * The engine's defaults, in one place: every layer that needs one (engine, runners, the draft model, the
 * memory budget check) reads it from here once options are resolved (resolveEngineLimits).
 */
export const ENGINE_DEFAULTS = {
  /** Bytes of KV block pool. */
  kvCacheBytes: 64 * 2 ** 20,
  /** Tokens per KV block. */
  blockSize: 16,
  /** Sequences in one model pass. */
  maxBatchSize: 32,
  /** Tokens computed in one pass (decodes + prefill chunks). */
  maxTokensPerStep: 512,
} as const;

/** The sizes that bound a runner's memory: the pool, and the most a pass can hold. */
export interface EngineLimits {
  kvCacheBytes: number;
  blockSize: number;
  maxBatchSize: number;
  maxTokensPerStep: number;
  /** Bytes the model may use in all (weights, KV pool, scratch); undefined: no limit. */
  memoryBudgetBytes: number | undefined;
}

/** Options as given (any of them unset) with the defaults filled in. */
export function resolveEngineLimits(options: Partial<EngineLimits>): EngineLimits {
  return {
    kvCacheBytes: options.kvCacheBytes ?? ENGINE_DEFAULTS.kvCacheBytes,
    blockSize: options.blockSize ?? ENGINE_DEFAULTS.blockSize,
    maxBatchSize: options.maxBatchSize ?? ENGINE_DEFAULTS.maxBatchSize,
    maxTokensPerStep: options.maxTokensPerStep ?? ENGINE_DEFAULTS.maxTokensPerStep,
    memoryBudgetBytes: options.memoryBudgetBytes,
  };
}

import type { KvDtype } from './kv/kv-dtype.js';

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
  /**
   * Tokens computed in one pass (decodes + prefill chunks). Past a few rows a pass gains nothing from more:
   * the kernels stream each weight once per 4 rows whatever the pass's length (a 512-token prompt in 2
   * passes of 256 or 4 of 128 took the time of one pass of 512, q4 and int8 kernels and onnxruntime-web
   * alike), while each token of budget holds a row of the residual stream in scratch and a longer pass
   * keeps every decoding stream waiting longer.
   */
  maxTokensPerStep: 256,
  /** The KV pool's element type. */
  kvDtype: 'fp32',
} as const;

/** The sizes that bound a runner's memory: the pool, and the most a pass can hold. */
export interface EngineLimits {
  kvCacheBytes: number;
  blockSize: number;
  maxBatchSize: number;
  maxTokensPerStep: number;
  /** The KV pool's element type: with kvCacheBytes, how many tokens the pool holds (and attention may score). */
  kvDtype: KvDtype;
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
    kvDtype: options.kvDtype ?? ENGINE_DEFAULTS.kvDtype,
    memoryBudgetBytes: options.memoryBudgetBytes,
  };
}

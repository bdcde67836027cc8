import type { Env } from '../env.js';
import { RateLimitConfigError, rateLimitConfig, type ShardLimits } from '../objects/tenancy/rate-limit-config.js';
import { ApiError } from './errors.js';
import { shardCount } from './routing.js';

/**
 * The limits shard `shard` enforces, sent with each request that generates: RATE_LIMITS, read here, and
 * the shard's place among SHARD_COUNT (its share). A RATE_LIMITS that cannot be read is a 503 naming it:
 * limits are not silently dropped.
 */
export function shardLimits(env: Env, shard: number): ShardLimits {
  try {
    return { config: rateLimitConfig(env.RATE_LIMITS), shard, shards: shardCount(env) };
  } catch (err) {
    if (!(err instanceof RateLimitConfigError)) throw err;
    throw new ApiError(503, err.message, 'server_error', null, 'invalid_rate_limits');
  }
}

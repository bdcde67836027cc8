/**
 * RATE_LIMITS: per-key limits as JSON, a `default` entry and per-key-name overrides, field by field:
 *
 *   {"default": {"rpm": 600, "tpm": 200000, "concurrent": 16}, "alice": {"rpm": 60}}
 *
 * rpm: requests admitted per 60 s; tpm: tokens generated per 60 s; concurrent: requests generating (or
 * waiting to) at once. A field left out (or null) is unlimited; unset or empty RATE_LIMITS limits nothing.
 *
 * Each shard counts what it serves, and enforces its share of each limit: shard s of n gets
 * floor(limit / n), plus one for the first (limit mod n) shards, and never less than 1. The shares sum to
 * the limit, so across the deployment a key never exceeds it (or n, when the limit is smaller than n).
 * A key's `null` lifts a default limit for it.
 */

export const LIMIT_FIELDS = ['rpm', 'tpm', 'concurrent'] as const;
export type LimitField = (typeof LIMIT_FIELDS)[number];
/** Limits as configured: a number, or null for none (which overrides a default). */
export type Limits = Partial<Record<LimitField, number | null>>;
/** Limits as a shard enforces them: a field left out is unlimited. */
export type Quota = Partial<Record<LimitField, number>>;

export interface RateLimitConfig {
  default: Limits;
  keys: Record<string, Limits>;
}

/** What a shard is told with each request: the limits, and which of how many shards it is (for its share). */
export interface ShardLimits {
  config: RateLimitConfig;
  shard: number;
  shards: number;
}

/** RATE_LIMITS cannot be read: the service refuses generation with a 503 naming it rather than run unlimited. */
export class RateLimitConfigError extends Error {
  override readonly name = 'RateLimitConfigError';
}

const NO_LIMITS: RateLimitConfig = { default: {}, keys: {} };
const parsed = new Map<string, RateLimitConfig>();

/** The config RATE_LIMITS holds (parsed once per distinct value); throws RateLimitConfigError. */
export function rateLimitConfig(raw: string | undefined): RateLimitConfig {
  const text = raw?.trim() ?? '';
  if (text === '') return NO_LIMITS;
  let config = parsed.get(text);
  if (!config) {
    config = parseRateLimits(text);
    if (parsed.size > 16) parsed.clear();
    parsed.set(text, config);
  }
  return config;
}

function parseRateLimits(text: string): RateLimitConfig {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new RateLimitConfigError('RATE_LIMITS must be a JSON object');
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw new RateLimitConfigError('RATE_LIMITS must be a JSON object of key names to limits');
  const config: RateLimitConfig = { default: {}, keys: {} };
  for (const [name, entry] of Object.entries(json)) {
    const limits = parseLimits(name, entry);
    if (name === 'default') config.default = limits;
    else config.keys[name] = limits;
  }
  return config;
}

function parseLimits(name: string, entry: unknown): Limits {
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry))
    throw new RateLimitConfigError(`RATE_LIMITS.${name} must be an object with rpm, tpm and/or concurrent`);
  const limits: Limits = {};
  for (const [field, value] of Object.entries(entry)) {
    if (!(LIMIT_FIELDS as readonly string[]).includes(field))
      throw new RateLimitConfigError(`RATE_LIMITS.${name}.${field} is not a limit (rpm, tpm, concurrent)`);
    if (value !== null && (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1))
      throw new RateLimitConfigError(`RATE_LIMITS.${name}.${field} must be a positive integer or null`);
    limits[field as LimitField] = value as number | null;
  }
  return limits;
}

/** The limits that apply to the key `name`, deployment-wide: its own fields over the default's. */
export function limitsFor(config: RateLimitConfig, name: string): Limits {
  return { ...config.default, ...config.keys[name] };
}

/** Shard `shard`'s share of a limit over `shards` shards (see the module comment). */
export function shardShare(limit: number, shard: number, shards: number): number {
  const base = Math.floor(limit / shards);
  return Math.max(1, base + (shard < limit % shards ? 1 : 0));
}

/** What shard `shard` of `shards` enforces for the key `name`. */
export function shardQuota({ config, shard, shards }: ShardLimits, name: string): Quota {
  const limits = limitsFor(config, name);
  const quota: Quota = {};
  for (const field of LIMIT_FIELDS) {
    const limit = limits[field];
    if (typeof limit === 'number') quota[field] = shardShare(limit, shard, shards);
  }
  return quota;
}

import type { ShardLimits } from './rate-limit-config.js';

/**
 * Who asks: the owner of what a key creates (sessions, hooks, jobs), as the worker resolved it from the
 * bearer key. The object never sees a key: only an HMAC of the key's name (the owner id, stored with each
 * row) and the name itself (for usage, limits and views).
 */
export interface Tenant {
  /** HMAC-SHA256 of the key's name under OWNER_SECRET (hex); ANONYMOUS_OWNER in dev mode. */
  owner: string;
  /** The key's name (`name:key` in API_KEYS, or derived from a bare key): on /metrics and in views. */
  name: string;
  /**
   * Whether rows without an owner (made before tenants existed, or in dev mode) are this tenant's too:
   * true in dev mode, for the only key of a single-key deployment, and for the key LEGACY_OWNER names.
   */
  legacy: boolean;
}

/** The owner of rows made in dev mode and of rows made before tenants existed (their owner column is empty). */
export const ANONYMOUS_OWNER = '';
/** The name usage of ANONYMOUS_OWNER's rows is counted under. */
export const ANONYMOUS_NAME = 'anonymous';

/** Whether a row owned by `rowOwner` is `tenant`'s to see and use. */
export function owns(tenant: Tenant, rowOwner: string): boolean {
  return rowOwner === tenant.owner || (tenant.legacy && rowOwner === ANONYMOUS_OWNER);
}

/** The owner ids a tenant's rows may carry, its own first: for `owner IN (?, ?)` lookups. */
export function ownerIds(tenant: Tenant): [string, string] {
  return [tenant.owner, tenant.legacy ? ANONYMOUS_OWNER : tenant.owner];
}

/** Whom a request runs for, and the limits the shard it was sent to enforces (its share of RATE_LIMITS). */
export interface Caller {
  tenant: Tenant;
  limits: ShardLimits;
}

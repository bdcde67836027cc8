import type { Env } from '../../env.js';
import { ANONYMOUS_NAME, ANONYMOUS_OWNER, type Tenant } from './tenant.js';

/**
 * Keys and their owners. API_KEYS lists keys, comma-separated, each `name:key` or a bare key. A named key's
 * owner is derived from its name, so a key can be rotated (`alice:new`, or `alice:old,alice:new` during a
 * rollover) and alice keeps her sessions, hooks and jobs. A bare key is named `key-<12 hex of its SHA-256>`
 * (shown on /metrics and in views; the key itself never is). The owner id stored with each row is
 * HMAC-SHA256(OWNER_SECRET, name): a reader of the storage learns nothing of the key or, without the
 * secret, which name a row belongs to. Dev mode (no keys) has one anonymous owner.
 */

export interface ApiKey {
  name: string;
  key: string;
}

export const KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/** The HMAC key when OWNER_SECRET is unset: owners still never hold a key, but are then a plain hash of the name. */
const DEFAULT_OWNER_SECRET = 'edge-infer owner ids';

const hex = (bytes: ArrayBuffer): string =>
  [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, '0')).join('');

const parsed = new Map<string, Promise<ApiKey[]>>();

/** API_KEYS as name/key pairs (parsed once per distinct value); empty in dev mode. */
export function apiKeys(env: Env): Promise<ApiKey[]> {
  const raw = env.API_KEYS ?? '';
  let keys = parsed.get(raw);
  if (!keys) {
    keys = parseApiKeys(raw);
    if (parsed.size > 16) parsed.clear();
    parsed.set(raw, keys);
  }
  return keys;
}

async function parseApiKeys(raw: string): Promise<ApiKey[]> {
  const keys: ApiKey[] = [];
  for (const entry of raw.split(',').map((e) => e.trim())) {
    const colon = entry.indexOf(':');
    if (colon > 0 && KEY_NAME.test(entry.slice(0, colon))) {
      const key = entry.slice(colon + 1).trim();
      if (key.length > 0) keys.push({ name: entry.slice(0, colon), key });
    } else if (entry.length > 0) {
      keys.push({ name: await bareKeyName(entry), key: entry });
    }
  }
  return keys;
}

/** A bare key's name: short enough to read on a dashboard, far too short to say anything of the key. */
export async function bareKeyName(key: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(key));
  return `key-${hex(digest).slice(0, 12)}`;
}

/** Whether API_KEYS is empty: every request is accepted, as the anonymous owner. */
export const devMode = (keys: ApiKey[]): boolean => keys.length === 0;

export const ANONYMOUS: Tenant = { owner: ANONYMOUS_OWNER, name: ANONYMOUS_NAME, legacy: true };

const ownerKeys = new Map<string, Promise<CryptoKey>>();

async function ownerId(env: Env, name: string): Promise<string> {
  const secret = env.OWNER_SECRET?.trim() || DEFAULT_OWNER_SECRET;
  let key = ownerKeys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey('raw', new TextEncoder().encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, [
      'sign',
    ]);
    if (ownerKeys.size > 4) ownerKeys.clear();
    ownerKeys.set(secret, key);
  }
  return hex(await crypto.subtle.sign('HMAC', await key, new TextEncoder().encode(name)));
}

/**
 * The tenant of the key named `name`. Rows made before tenants (their owner is the anonymous one) are the
 * only key's in a single-key deployment, else the key LEGACY_OWNER names (nobody's when it is unset).
 */
export async function tenantOf(env: Env, keys: ApiKey[], name: string): Promise<Tenant> {
  const names = new Set(keys.map((k) => k.name));
  const legacy = names.size === 1 || env.LEGACY_OWNER?.trim() === name;
  return { owner: await ownerId(env, name), name, legacy };
}

/**
 * The one owner a request without a key can mean (an inbound webhook addressed by its name rather than its
 * id): the anonymous one in dev mode, the only key's in a single-key deployment; undefined with several keys.
 */
export async function soleTenant(env: Env): Promise<Tenant | undefined> {
  const keys = await apiKeys(env);
  if (devMode(keys)) return ANONYMOUS;
  const names = new Set(keys.map((k) => k.name));
  return names.size === 1 ? tenantOf(env, keys, keys[0].name) : undefined;
}

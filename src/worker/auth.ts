import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from './app-env.js';
import { ApiError } from './errors.js';
import { ANONYMOUS, apiKeys, devMode, tenantOf, type ApiKey } from '../objects/tenancy/api-keys.js';

let devModeLogged = false;

/** Constant-time comparison, so a key cannot be guessed a byte at a time from response times. */
function sameKey(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

/** The entry `given` matches; every key is compared, so the time taken does not say which one did. */
function matching(keys: ApiKey[], given: string): ApiKey | undefined {
  let found: ApiKey | undefined;
  for (const entry of keys) if (sameKey(entry.key, given)) found ??= entry;
  return found;
}

/**
 * Bearer keys from API_KEYS (see objects/tenancy/api-keys.ts). The key's tenant (owner and name) is set on the context
 * for the routes. With none configured the service runs in dev mode and accepts every request as the
 * anonymous owner; it says so once per isolate so nobody deploys that by accident unnoticed.
 */
export const requireApiKey: MiddlewareHandler<AppEnv> = async (c, next) => {
  const keys = await apiKeys(c.env);
  if (devMode(keys)) {
    if (!devModeLogged) {
      devModeLogged = true;
      console.warn('edge-infer: API_KEYS is empty, running in dev mode: every request is accepted without a key');
    }
    c.set('tenant', ANONYMOUS);
    return next();
  }
  const header = c.req.header('authorization') ?? '';
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!m)
    throw new ApiError(
      401,
      'missing API key: send "Authorization: Bearer <key>"',
      'invalid_request_error',
      null,
      'missing_api_key',
    );
  const entry = matching(keys, m[1]);
  if (!entry) throw new ApiError(401, 'invalid API key', 'invalid_request_error', null, 'invalid_api_key');
  c.set('tenant', await tenantOf(c.env, keys, entry.name));
  return next();
};

/**
 * The routes anyone may call, without a key: the playground page (it holds no data; what it calls needs
 * the key) and inbound webhook events (their Standard Webhooks signature is their authentication).
 */
export const PUBLIC_ROUTES: readonly { method: string; path: RegExp; what: string }[] = [
  { method: 'GET', path: /^\/$/, what: 'the playground page' },
  { method: 'HEAD', path: /^\/$/, what: 'the playground page' },
  { method: 'POST', path: /^\/v1\/hooks\/[^/]+$/, what: 'an inbound webhook event (signed)' },
  { method: 'GET', path: /^\/health$/, what: 'liveness (no data)' },
  { method: 'HEAD', path: /^\/health$/, what: 'liveness (no data)' },
];

export function publicRoute(method: string, path: string): boolean {
  return PUBLIC_ROUTES.some((route) => route.method === method && route.path.test(path));
}

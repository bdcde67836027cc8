import type { MiddlewareHandler } from 'hono';
import type { Env } from '../env.js';
import { ApiError } from './errors.js';

let devModeLogged = false;

export function apiKeys(env: Env): string[] {
  return (env.API_KEYS ?? '')
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k.length > 0);
}

/** Constant-time comparison, so a key cannot be guessed a byte at a time from response times. */
function sameKey(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

/**
 * Bearer keys from API_KEYS (comma-separated). With none configured the service runs in dev mode and
 * accepts every request; it says so once per isolate so nobody deploys that by accident unnoticed.
 */
export const requireApiKey: MiddlewareHandler<{ Bindings: Env }> = async (c, next) => {
  const keys = apiKeys(c.env);
  if (keys.length === 0) {
    if (!devModeLogged) {
      devModeLogged = true;
      console.warn('edge-infer: API_KEYS is empty, running in dev mode: every request is accepted without a key');
    }
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
  if (!keys.some((k) => sameKey(k, m[1])))
    throw new ApiError(401, 'invalid API key', 'invalid_request_error', null, 'invalid_api_key');
  return next();
};

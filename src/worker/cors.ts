import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from './app-env.js';
import { apiKeys, devMode } from '../objects/tenancy/api-keys.js';
import type { Env } from '../env.js';

/** Headers a browser may read from our answers besides the safelisted ones: the rate limits and the retry hint. */
const EXPOSED = [
  'retry-after',
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'x-ratelimit-limit-tokens',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
];

/** Whether a page at `origin` may call the API: CORS_ORIGINS (`*` or a comma-separated list), else dev mode's any. */
export async function originAllowed(env: Env, origin: string): Promise<boolean> {
  const list = env.CORS_ORIGINS?.trim();
  if (list) return list === '*' || list.split(',').some((o) => o.trim().replace(/\/$/, '') === origin);
  return devMode(await apiKeys(env));
}

/**
 * CORS, before the key check: a preflight (OPTIONS with Access-Control-Request-Method) carries no key and is
 * answered here, 204, with the grant where the origin is allowed; other answers get Access-Control-Allow-Origin
 * (the caller's origin, echoed) where it is. A refused origin gets no grant, so its browser blocks the call.
 */
export const corsMiddleware: MiddlewareHandler<AppEnv> = async (c, next) => {
  const origin = c.req.header('origin');
  const allowed = origin !== undefined && (await originAllowed(c.env, origin));
  if (c.req.method === 'OPTIONS' && c.req.header('access-control-request-method')) {
    const headers = new Headers({ vary: 'Origin' });
    if (allowed) {
      headers.set('access-control-allow-origin', origin);
      headers.set('access-control-allow-methods', 'GET, HEAD, POST, PUT, DELETE, OPTIONS');
      headers.set(
        'access-control-allow-headers',
        c.req.header('access-control-request-headers') ?? 'authorization, content-type',
      );
      headers.set('access-control-max-age', '86400');
    }
    return new Response(null, { status: 204, headers });
  }
  await next();
  if (!allowed) return;
  const res = new Response(c.res.body, c.res);
  res.headers.set('access-control-allow-origin', origin);
  res.headers.append('vary', 'Origin');
  res.headers.set('access-control-expose-headers', EXPOSED.join(', '));
  c.res = res;
};

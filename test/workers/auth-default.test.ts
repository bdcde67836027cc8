// Authentication by default: every route the app registers answers 401 without a key when keys are
// configured, except the ones PUBLIC_ROUTES names. The routes are walked from the app itself, so a route
// added later is covered without anyone remembering to list it here.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { Env } from '../../src/env.js';
import app from '../../src/worker/app.js';
import { publicRoute } from '../../src/worker/auth.js';

const deployment = { ...(env as unknown as Env), API_KEYS: 'alice:sk-alice-auth' };

/** Every (method, path) a handler answers, with parameters and wildcards filled in. */
function registered(): { method: string; path: string }[] {
  const seen = new Map<string, { method: string; path: string }>();
  for (const route of app.routes) {
    if (route.method === 'ALL') continue; // middleware (the key check itself, CORS and the like)
    const path = route.path.replace(/:[A-Za-z_]+(\{[^}]*\})?/g, 'x').replace(/\*/g, 'x');
    seen.set(`${route.method} ${path}`, { method: route.method, path });
  }
  return [...seen.values()];
}

async function send(method: string, path: string): Promise<Response> {
  const init: RequestInit = { method };
  if (method !== 'GET' && method !== 'HEAD') init.body = '{}';
  return app.fetch(new Request(`http://edge-infer.test${path}`, init), deployment);
}

describe('every route is behind the key unless it is listed as public', () => {
  it('walks the registered routes', async () => {
    const routes = registered();
    expect(routes.length, 'the walk found the API').toBeGreaterThan(10);
    const privateOnes = routes.filter((r) => !publicRoute(r.method, r.path));
    expect(privateOnes.map((r) => `${r.method} ${r.path}`)).toContain('POST /v1/chat/completions');
    for (const { method, path } of privateOnes) {
      const res = await send(method, path);
      const text = await res.text();
      expect(res.status, `${method} ${path}: ${text}`).toBe(401);
      expect(JSON.parse(text).error.code).toBe('missing_api_key');
    }
    for (const { method, path } of routes.filter((r) => publicRoute(r.method, r.path))) {
      const res = await send(method, path);
      await res.arrayBuffer();
      expect(res.status, `${method} ${path} is public`).not.toBe(401);
    }
  });

  it('an unknown path is 401 without a key, 404 with one: nothing is learnt of the routes without a key', async () => {
    const res = await send('GET', '/v1/nothing-here');
    expect(res.status).toBe(401);
    await res.arrayBuffer();
    const known = await app.fetch(
      new Request('http://edge-infer.test/v1/nothing-here', { headers: { authorization: 'Bearer sk-alice-auth' } }),
      deployment,
    );
    expect(known.status).toBe(404);
    await known.arrayBuffer();
  });
});

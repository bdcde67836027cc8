import { Hono } from 'hono';
import type { Env } from '../../env.js';
import { apiKeys, devMode } from '../../objects/tenancy/api-keys.js';
import page from '../playground/index.html';

/**
 * GET /: the playground, one static page bundled into the worker as text. It is served by the worker itself
 * because the static-assets binding serves ./models, whose files must stay unreachable as public URLs.
 * The page is public; everything it calls is behind the API key, which it sends as an Authorization header.
 */
const playground = new Hono<{ Bindings: Env }>();

// The page only calls this origin; inline script and style are its own (one file, no build step).
const CSP =
  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

playground.get('/', async (c) => {
  // Whether to ask for a key before calling anything (a 401 would tell the same; this just spares the round trip).
  const html = page.replace('%AUTH%', devMode(await apiKeys(c.env)) ? 'none' : 'required');
  return c.html(html, 200, {
    'content-security-policy': CSP,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-cache',
  });
});

export default playground;

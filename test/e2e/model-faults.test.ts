// A model source that fails (issue 44, findings 2 and 7), against `wrangler dev` with two keys reading `tiny`
// from a MODEL_URL served here, whose behaviour each test sets: a source that sends 64 bytes a second, one whose
// files end before their Content-Length, one that answers 500. Each key gets a 503 `model_unavailable` naming
// the source and what went wrong, with a Retry-After, in seconds rather than never; and once the source is
// mended, the next request loads the model and is answered, with no restart.
import { readFileSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api as call } from './helpers/service-client.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

type Mode = 'ok' | 'slow' | 'truncated' | 'error';
const ROOT = join(import.meta.dirname, '../../models/tiny');
const KEYS = { alice: 'sk-alice-mf', bob: 'sk-bob-mf' };

let mode: Mode = 'slow';
let files: Server;
let server: DevServer;

/** Serves ROOT as `mode` says: whole, at 64 B/s, cut at half its Content-Length, or 500 for everything. */
function serveModel(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse): void {
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  const file = join(ROOT, path);
  if (mode === 'error') return void res.writeHead(500).end('upstream is broken');
  let size: number;
  try {
    size = statSync(file).size;
  } catch {
    return void res.writeHead(404).end();
  }
  res.writeHead(200, { 'content-length': String(size) });
  if (req.method === 'HEAD') return void res.end();
  const bytes = readFileSync(file);
  if (mode === 'ok') return void res.end(bytes);
  if (mode === 'truncated') {
    res.write(bytes.subarray(0, size >> 1));
    return void res.destroy();
  }
  let at = 0;
  const drip = setInterval(() => {
    if (res.destroyed || at >= size) {
      clearInterval(drip);
      if (!res.destroyed) res.end();
      return;
    }
    res.write(bytes.subarray(at, at + 64));
    at += 64;
  }, 1000);
  res.on('close', () => clearInterval(drip));
}

beforeAll(async () => {
  files = createServer(serveModel);
  await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(files.address() as AddressInfo).port}/`;
  server = await startDevServer({
    MODEL: 'tiny',
    MODEL_URL: url,
    SHARD_COUNT: '1',
    API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}`,
    MODEL_STALL_TIMEOUT_MS: '3000',
    MODEL_LOAD_TIMEOUT_MS: '20000',
  });
});
afterAll(async () => {
  await server?.stop();
  await new Promise((resolve) => files?.close(resolve));
});

const api = (key: string, method: string, path: string, body?: unknown) => call(server.url, key, method, path, body);

/** A 1-token request of `key`'s: its status, error, Retry-After and how long it took. */
async function ask(key: string) {
  const sent = performance.now();
  const res = await api(key, 'POST', '/v1/completions', { prompt: 'Ping', max_tokens: 1 });
  const body = (await res.json()) as { error?: { code: string; message: string } };
  return {
    status: res.status,
    error: body.error,
    retryAfter: res.headers.get('retry-after'),
    ms: Math.round(performance.now() - sent),
  };
}

describe('a model source that fails is a 503 with its reason, and the next request loads again (2, 7)', () => {
  it('a source sending 64 B/s: both keys get 503 model_unavailable after the stall deadline, not a hang', async () => {
    mode = 'slow';
    const [alice, bob] = await Promise.all([ask(KEYS.alice), ask(KEYS.bob)]);
    console.log(`64 B/s source: alice's answer after ${alice.ms} ms, bob's after ${bob.ms} ms`);
    for (const answer of [alice, bob]) {
      expect(answer.status).toBe(503);
      expect(answer.error?.code).toBe('model_unavailable');
      expect(answer.error?.message).toMatch(/MODEL_URL.*no data for 3000 ms/);
      expect(answer.error?.message).not.toContain('127.0.0.1');
      expect(Number(answer.retryAfter)).toBeGreaterThan(0);
    }
  });

  it('files cut short of their Content-Length, then a source answering 500: each a 503 naming it', async () => {
    mode = 'truncated';
    const cut = await ask(KEYS.alice);
    console.log(`truncated files: ${cut.status} ${cut.error?.code} after ${cut.ms} ms: ${cut.error?.message}`);
    expect(cut.status).toBe(503);
    expect(cut.error?.code).toBe('model_unavailable');
    expect(cut.error?.message).toMatch(/fetching [\w./]+ at MODEL_URL\/: /);
    mode = 'error';
    const broken = await ask(KEYS.bob);
    expect(broken.status).toBe(503);
    expect(broken.error?.message).toMatch(/HTTP 500/);
  });

  it('once the source is mended the next request loads the model: no restart', async () => {
    mode = 'ok';
    const bob = await ask(KEYS.bob);
    console.log(`after mending: bob's request ${bob.status} in ${bob.ms} ms`);
    expect(bob.status).toBe(200);
    expect((await ask(KEYS.alice)).status).toBe(200);
  });
});

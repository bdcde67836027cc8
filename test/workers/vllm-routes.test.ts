// What users of vLLM, llama.cpp's server and Ollama reach for first (issue 47, finding 6), through the worker's
// fetch inside workerd: CORS (a browser page on another origin), /health, vLLM's /tokenize and /detokenize,
// max_model_len in /v1/models, and one `n` limit that both the worker and the engine state alike.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { Env } from '../../src/env.js';
import app from '../../src/worker/app.js';
import { call, expectError, post, postJson } from './service-helpers.js';

const PAGE = 'http://localhost:5173';

/** The app with this deployment's vars over the test's (keys configured: not dev mode). */
const deployed =
  (vars: Partial<Env>) =>
  (path: string, init: RequestInit = {}) =>
    app.fetch(new Request(`http://edge-infer.test${path}`, init), { ...(env as unknown as Env), ...vars });

describe('CORS', () => {
  it('dev mode (no API_KEYS, as npm start): any origin; the preflight is answered without a key', async () => {
    const pre = await call('/v1/chat/completions', {
      method: 'OPTIONS',
      headers: {
        origin: PAGE,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type',
      },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe(PAGE);
    expect(pre.headers.get('access-control-allow-methods')).toContain('POST');
    expect(pre.headers.get('access-control-allow-headers')).toBe('content-type');
    const res = await call('/v1/models', { headers: { origin: PAGE } });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBe(PAGE);
    expect(res.headers.get('vary')).toContain('Origin');
    await res.arrayBuffer();
  });

  it('with keys: only CORS_ORIGINS; errors carry the grant too, so the page can read them', async () => {
    const fetch = deployed({ API_KEYS: 'alice:sk-alice-cors', CORS_ORIGINS: `https://ui.example, ${PAGE}` });
    const preflight = (origin: string) =>
      fetch('/v1/chat/completions', {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
      });
    const granted = await preflight(PAGE);
    expect(granted.status).toBe(204);
    expect(granted.headers.get('access-control-allow-headers')).toBe('authorization');
    const refused = await preflight('https://evil.example');
    expect(refused.status).toBe(204);
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();
    const noKey = await fetch('/v1/models', { headers: { origin: PAGE } });
    expect(noKey.status).toBe(401);
    expect(noKey.headers.get('access-control-allow-origin')).toBe(PAGE);
    await noKey.arrayBuffer();
    const other = await fetch('/v1/models', {
      headers: { origin: 'https://evil.example', authorization: 'Bearer sk-alice-cors' },
    });
    expect(other.status).toBe(200);
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
    await other.arrayBuffer();
    // Keys and no CORS_ORIGINS: no origin is granted.
    const closed = await deployed({ API_KEYS: 'alice:sk-alice-cors' })('/v1/models', {
      headers: { origin: PAGE, authorization: 'Bearer sk-alice-cors' },
    });
    expect(closed.headers.get('access-control-allow-origin')).toBeNull();
    await closed.arrayBuffer();
    const any = await deployed({ API_KEYS: 'alice:sk-alice-cors', CORS_ORIGINS: '*' })('/health', {
      headers: { origin: PAGE },
    });
    expect(any.headers.get('access-control-allow-origin')).toBe(PAGE);
    await any.arrayBuffer();
  });
});

describe('/health', () => {
  it('200 without a key, even where keys are configured', async () => {
    const res = await deployed({ API_KEYS: 'alice:sk-alice-cors' })('/health');
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });
});

describe("vLLM's /tokenize and /detokenize", () => {
  it('a prompt to its ids with count and max_model_len, and back', async () => {
    const prompt = 'Hello there, tokenizer';
    const got = await postJson<{ tokens: number[]; count: number; max_model_len: number }>('/tokenize', { prompt });
    expect(got.count).toBe(got.tokens.length);
    expect(got.count).toBeGreaterThan(3);
    expect(got.max_model_len).toBe(2048); // tiny's max_position_embeddings
    expect(await postJson('/detokenize', { tokens: got.tokens })).toEqual({ prompt });
    // The ids a completion of the prompt counts: usage.prompt_tokens agrees.
    const done = await postJson<{ usage: { prompt_tokens: number } }>('/v1/completions', { prompt, max_tokens: 1 });
    expect(done.usage.prompt_tokens).toBe(got.count);
  });

  it('bad input: 400 naming the field, in the OpenAI error schema', async () => {
    await expectError(await post('/tokenize', { prompt: 3 }), 400, 'prompt');
    await expectError(await post('/tokenize', { messages: [] }), 400, 'messages', 'unsupported_parameter');
    await expectError(await post('/detokenize', { tokens: [1, -2] }), 400, 'tokens');
    await expectError(await post('/detokenize', { tokens: [1, 999_999] }), 400, 'tokens');
    await expectError(await post('/tokenize', { prompt: 'x', model: 'other' }), 404, 'model', 'model_not_found');
  });
});

describe('GET /v1/models', () => {
  it('says max_model_len, before any shard has loaded the model too', async () => {
    const body = (await (await call('/v1/models')).json()) as { data: { max_model_len: number | null }[] };
    expect(body.data[0].max_model_len).toBe(2048);
  });
});

describe('one n limit', () => {
  it('the worker refuses past MAX_BATCH with the words the engine uses', async () => {
    const e = await expectError(
      await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], n: 17 }),
      400,
      'n',
      'invalid_value',
    );
    expect(e.message).toBe('n must be an integer in [1, 16], got 17');
    const ok = await postJson<{ choices: unknown[] }>('/v1/completions', { prompt: 'hi', n: 16, max_tokens: 1 });
    expect(ok.choices).toHaveLength(16);
  });
});

// /v1/embeddings end to end: `wrangler dev` (real workerd, real Durable Objects) over real HTTP, spoken to by the
// official openai client (which asks for base64) and by plain fetch; vectors against the float64 reference's
// pooled hidden states, alone = batched, bad input refused with nothing else affected, tokens counted per key.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadReference } from '../reference/load-reference.js';
import type { LlamaReference } from '../reference/llama-reference.js';
import { modelDir } from '../helpers/engines.js';
import { randomIds } from '../helpers/prng.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEY = 'sk-alice-embed';
const LIMITED = 'sk-carol-embed';
let server: DevServer;
let client: OpenAI;
let ref: LlamaReference;

beforeAll(async () => {
  server = await startDevServer({
    API_KEYS: `alice:${KEY},carol:${LIMITED}`,
    RATE_LIMITS: JSON.stringify({ carol: { tpm: 10 } }),
    SHARD_COUNT: '1',
    EMBEDDINGS_MAX_INPUTS: '4',
    EMBEDDINGS_MAX_INPUT_TOKENS: '64',
  });
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
  ref = await loadReference(modelDir('tiny'));
});
afterAll(() => server?.stop());

const post = (body: unknown, key = KEY): Promise<Response> =>
  fetch(`${server.url}/v1/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const textIds = (seed: number, count: number): number[] => randomIds(seed, count, 3, 512);

/** The reference's last-token final-normed hidden state, L2-normalised (tiny declares no pooling). */
function referenceVector(ids: number[]): number[] {
  ref.reset();
  ref.forward(ids, 0);
  const h = Array.from(ref.hiddenStates[ids.length - 1]);
  const norm = Math.hypot(...h);
  return h.map((x) => x / norm);
}

const cosine = (a: number[], b: number[]): number =>
  a.reduce((s, x, i) => s + x * b[i], 0) / (Math.hypot(...a) * Math.hypot(...b));

describe('/v1/embeddings', () => {
  it('the official client (base64) gets the float64 reference vectors, equal to the float encoding', async () => {
    const inputs = [textIds(1, 9), textIds(2, 30), textIds(3, 1)];
    const res = await client.embeddings.create({ model: 'tiny', input: inputs });
    expect(res.object).toBe('list');
    expect(res.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(res.usage).toEqual({ prompt_tokens: 40, total_tokens: 40 });
    for (const [i, d] of res.data.entries()) {
      expect(d.embedding.length).toBe(64);
      expect(cosine(d.embedding, referenceVector(inputs[i]))).toBeGreaterThanOrEqual(0.9999);
    }
    const float = (await (await post({ input: inputs, encoding_format: 'float' })).json()) as {
      data: { embedding: number[] }[];
    };
    expect(float.data.map((d) => d.embedding)).toEqual(res.data.map((d) => d.embedding));
  });

  it('text inputs; a vector alone equals the same input in a batch, bit for bit', async () => {
    const texts = ['the cat sat on the mat', 'a dog', 'the quick brown fox jumps', 'hello'];
    const alone = await Promise.all(
      texts.map(async (t) => (await client.embeddings.create({ model: 'tiny', input: t })).data[0].embedding),
    );
    const batched = await client.embeddings.create({ model: 'tiny', input: texts });
    expect(batched.data.map((d) => d.embedding)).toEqual(alone);
    expect(batched.usage.prompt_tokens).toBeGreaterThan(texts.length);
  });

  it('dimensions truncates and renormalises', async () => {
    const ids = textIds(4, 12);
    const res = await client.embeddings.create({ model: 'tiny', input: [ids], dimensions: 16 });
    const v = res.data[0].embedding;
    expect(v.length).toBe(16);
    expect(Math.abs(Math.hypot(...v) - 1)).toBeLessThan(1e-6);
    const full = referenceVector(ids).slice(0, 16);
    expect(cosine(v, full)).toBeGreaterThanOrEqual(0.9999);
  });

  it('bad input is a 400 naming the parameter, and changes nothing else', async () => {
    const good = { input: [textIds(5, 8)], encoding_format: 'float' };
    const before = (await (await post(good)).json()) as unknown;
    const cases: [unknown, string][] = [
      [{ input: '' }, 'input'],
      [{ input: [] }, 'input'],
      [{}, 'input'],
      [{ input: ['a', 'b', 'c', 'd', 'e'] }, 'input'],
      [{ input: [textIds(6, 65)] }, 'input'],
      [{ input: ['ok', ''] }, 'input[1]'],
      [{ input: [[1, 2], 'mixed'] }, 'input'],
      [{ input: [[5], [99999]] }, 'input[1]'],
      [{ input: 'x', dimensions: 0 }, 'dimensions'],
      [{ input: 'x', dimensions: 65 }, 'dimensions'],
      [{ input: 'x', dimensions: 'all' }, 'dimensions'],
      [{ input: 'x', encoding_format: 'hex' }, 'encoding_format'],
    ];
    for (const [body, param] of cases) {
      const res = await post(body);
      const err = (await res.json()) as { error: { type: string; param: string; message: string } };
      expect({ status: res.status, param: err.error.param }, JSON.stringify(body)).toEqual({ status: 400, param });
      expect(err.error.type).toBe('invalid_request_error');
    }
    await expect(client.embeddings.create({ model: 'tiny', input: '' })).rejects.toMatchObject({ status: 400 });
    // Another model's name is the service's usual 404 (model_not_found).
    expect((await post({ input: 'x', model: 'another' })).status).toBe(404);
    expect(await (await post(good)).json()).toEqual(before);
  });

  it("a key's prompt tokens count against its tokens per minute; another key is unaffected", async () => {
    const first = await post({ input: [textIds(7, 20)] }, LIMITED);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-ratelimit-limit-tokens')).toBe('10');
    const refused = await post({ input: [textIds(8, 3)] }, LIMITED);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('rate_limit_exceeded');
    expect((await post({ input: [textIds(8, 3)] })).status).toBe(200);
  });
});

// The server-wide speculation default (SPECULATIVE, DRAFT_MODEL) through `wrangler dev`: requests that do
// not ask speculate with the draft model and give the same greedy text as with speculation turned off per
// request; a malformed SPECULATIVE is a 503 naming it, not a silent default.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

let server: DevServer;
beforeAll(async () => {
  server = await startDevServer({ SPECULATIVE: 'draft:3', DRAFT_MODEL: 'tiny-draft' });
});
afterAll(() => server?.stop());

/** What these tests read of a completion, or of the error body that replaces it. */
interface CompletionBody {
  choices?: { text: string }[];
  error?: { message: string };
}

async function complete(
  base: string,
  body: Record<string, unknown>,
): Promise<{ status: number; json: CompletionBody }> {
  const res = await fetch(`${base}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as CompletionBody };
}

async function counter(name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
}

describe('SPECULATIVE and DRAFT_MODEL', () => {
  it('requests speculate by default with the draft model, and their greedy text is unchanged', async () => {
    const request = { prompt: 'Once upon a time there was', max_tokens: 24, temperature: 0, ignore_eos: true };
    const before = await counter('edge_infer_speculative_proposed_tokens_total');
    const speculated = await complete(server.url, request);
    expect(speculated.status).toBe(200);
    expect(await counter('edge_infer_speculative_proposed_tokens_total')).toBeGreaterThan(before);
    const plain = await complete(server.url, { ...request, speculative: null });
    expect(speculated.json.choices![0].text).toBe(plain.json.choices![0].text);
  });

  it('a malformed SPECULATIVE is a 503 naming it', async () => {
    const bad = await startDevServer({ SPECULATIVE: 'medusa:2' });
    try {
      const { status, json } = await complete(bad.url, { prompt: 'Hi', max_tokens: 2 });
      expect(status).toBe(503);
      expect(json.error!.message).toMatch(/SPECULATIVE\.method/);
    } finally {
      bad.stop();
    }
  });
});

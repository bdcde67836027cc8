// The service end to end: `wrangler dev` (real workerd, real Durable Objects) over real HTTP, spoken to
// by the official openai client and by a plain fetch + eventsource-parser for the raw SSE framing.
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEY = 'e2e-key';
let server: DevServer;
let client: OpenAI;

beforeAll(async () => {
  server = await startDevServer({ API_KEYS: KEY });
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
});
afterAll(() => server?.stop());

const post = (path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> =>
  fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

/** Reads an SSE response to the end with a real parser; returns the data of every event. */
async function sseEvents(res: Response): Promise<string[]> {
  const events: string[] = [];
  const parser = createParser({ onEvent: (e: EventSourceMessage) => events.push(e.data) });
  const decoder = new TextDecoder();
  const reader = res.body!.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
    parser.feed(decoder.decode(chunk.value, { stream: true }));
  return events;
}

describe('official openai client', () => {
  it('lists the model', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toContain('tiny');
  });

  it('chat completion, not streamed and streamed, give the same greedy text', async () => {
    const request = {
      model: 'tiny',
      messages: [{ role: 'user' as const, content: 'Tell me a story.' }],
      max_tokens: 24,
      temperature: 0,
    };
    const whole = await client.chat.completions.create(request);
    expect(whole.object).toBe('chat.completion');
    expect(whole.choices[0].message.role).toBe('assistant');
    expect(whole.usage!.completion_tokens).toBeGreaterThan(0);
    expect(whole.usage!.total_tokens).toBe(whole.usage!.prompt_tokens + whole.usage!.completion_tokens);

    const stream = await client.chat.completions.create({
      ...request,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      if (chunk.choices.length === 0) usage = chunk.usage;
      for (const choice of chunk.choices) {
        text += choice.delta.content ?? '';
        finish = choice.finish_reason ?? finish;
      }
    }
    expect(text).toBe(whole.choices[0].message.content);
    expect(finish).toBe(whole.choices[0].finish_reason);
    expect(usage).toMatchObject({
      prompt_tokens: whole.usage!.prompt_tokens,
      completion_tokens: whole.usage!.completion_tokens,
    });
    expect(usage!.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(0);
  });

  it('text completion, not streamed and streamed', async () => {
    const request = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 16, temperature: 0 };
    const whole = await client.completions.create(request);
    expect(whole.object).toBe('text_completion');
    let text = '';
    for await (const chunk of await client.completions.create({ ...request, stream: true }))
      text += chunk.choices[0]?.text ?? '';
    expect(text).toBe(whole.choices[0].text);
  });

  it('the same seed gives the same sample; n gives n choices', async () => {
    const request = {
      model: 'tiny',
      messages: [{ role: 'user' as const, content: 'Hi' }],
      max_tokens: 16,
      temperature: 1,
      seed: 11,
    };
    const a = await client.chat.completions.create(request);
    const b = await client.chat.completions.create(request);
    expect(b.choices[0].message.content).toBe(a.choices[0].message.content);
    const many = await client.chat.completions.create({ ...request, n: 3 });
    expect(many.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(many.choices[0].message.content).toBe(a.choices[0].message.content);
  });

  it('bad parameters are 400s in OpenAI error schema, raised as the client error class', async () => {
    const bad = client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'x' }],
      top_p: 1.5,
    });
    await expect(bad).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(bad).rejects.toMatchObject({ status: 400, param: 'top_p' });
  });

  it('a wrong key is refused', async () => {
    const stranger = new OpenAI({ apiKey: 'wrong', baseURL: `${server.url}/v1`, maxRetries: 0 });
    await expect(stranger.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
  });
});

describe('raw HTTP', () => {
  it('SSE is framed as OpenAI frames it: data events, a usage chunk with no choices, then [DONE]', async () => {
    const res = await post('/v1/chat/completions', {
      model: 'tiny',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await sseEvents(res);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    const usage = chunks.at(-1);
    expect(usage.choices).toEqual([]);
    expect(usage.usage.completion_tokens).toBeGreaterThan(0);
    expect(chunks.at(-2).choices[0].finish_reason).toMatch(/^(stop|length)$/);
  });

  const badInputs: [string, () => Promise<Response>, number][] = [
    ['malformed JSON', () => post('/v1/chat/completions', '{"model": "tiny", "messages": ['), 400],
    ['messages of the wrong type', () => post('/v1/chat/completions', { model: 'tiny', messages: 'hello' }), 400],
    ['max_tokens as a string', () => post('/v1/completions', { model: 'tiny', prompt: 'x', max_tokens: '5' }), 400],
    ['negative temperature', () => post('/v1/completions', { model: 'tiny', prompt: 'x', temperature: -1 }), 400],
    ['an unknown model', () => post('/v1/completions', { model: 'gpt-nothing', prompt: 'x' }), 404],
    ['a body past the limit', () => post('/v1/completions', { model: 'tiny', prompt: 'x'.repeat(2_000_000) }), 413],
    ['no key', () => fetch(`${server.url}/v1/models`), 401],
    ['an unknown route', () => post('/v1/nothing', {}), 404],
  ];
  for (const [name, send, status] of badInputs) {
    it(`${name} → ${status} with an OpenAI error body`, async () => {
      const res = await send();
      expect(res.status).toBe(status);
      const body = (await res.json()) as { error: Record<string, unknown> };
      expect(body.error).toMatchObject({ message: expect.any(String), type: expect.any(String) });
      expect(body.error).toHaveProperty('param');
      expect(body.error).toHaveProperty('code');
    });
  }

  it('after all that, the service still answers', async () => {
    const res = await post('/v1/completions', { model: 'tiny', prompt: 'still here', max_tokens: 4 });
    expect(res.status).toBe(200);
  });
});

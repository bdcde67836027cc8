// LoRA adapters over HTTP in workerd (`wrangler dev`, MODEL=tiny-lora, q4 on the kernels): /v1/models lists
// the folder's adapters with the base as their parent; a base request and an adapter request sent together
// (one batch) each give the greedy text the engine gives in Node for that model alone; unknown and bad
// adapters answer 404 and 400 in OpenAI's schema, naming the file, and the service serves on.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { nodeRuntime } from '../../scripts/lib/runtimes.js';
import { Engine } from '../../src/engine/engine.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { modelDir } from '../helpers/engines.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';
import { hookSecret, inbox, sendEvent } from './helpers/service-client.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const BASE = 'tiny-lora';
let server: DevServer;

beforeAll(async () => {
  server = await startDevServer({ MODEL: BASE, MODEL_DTYPE: 'q4', SHARD_COUNT: '1' });
});
afterAll(async () => {
  await server?.stop();
});

const completion = (model: string, prompt: string) =>
  fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ model, prompt, max_tokens: 16, temperature: 0, ignore_eos: true }),
  });

it('/v1/models lists the adapters with the base model as their parent', async () => {
  const res = await fetch(`${server.url}/v1/models`);
  const body = (await res.json()) as { data: { id: string; parent?: string }[] };
  expect(body.data[0].id).toBe(BASE);
  expect(body.data.slice(1).map((m) => ({ id: m.id, parent: m.parent }))).toEqual(
    ['qv-r8', 'attn-r12', 'mlp-r4-rs', 'all-r16'].map((id) => ({ id, parent: BASE })),
  );
  expect(((await (await fetch(`${server.url}/v1/models/all-r16`)).json()) as { parent: string }).parent).toBe(BASE);
});

it('a base and an adapter request in one batch each give what the engine gives in Node', async () => {
  const prompt = 'served by name';
  const [base, adapter] = await Promise.all([completion(BASE, prompt), completion('all-r16', prompt)]);
  expect(base.status, await base.clone().text()).toBe(200);
  expect(adapter.status, await adapter.clone().text()).toBe(200);
  const baseBody = (await base.json()) as { model: string; choices: { text: string }[] };
  const adapterBody = (await adapter.json()) as { model: string; choices: { text: string }[] };
  expect(adapterBody.model).toBe('all-r16');

  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir(BASE)), { dtype: 'q4' });
  try {
    const run = async (a?: string) => {
      const options = a ? { adapter: await engine.loadAdapter(a) } : {};
      const req = { prompt, max_tokens: 16, temperature: 0, ignore_eos: true };
      for await (const e of engine.generate(req, options)) if (e.type === 'done') return e.text;
      return '';
    };
    expect(baseBody.choices[0].text).toBe(await run());
    expect(adapterBody.choices[0].text).toBe(await run('all-r16'));
    expect(adapterBody.choices[0].text).not.toBe(baseBody.choices[0].text);
  } finally {
    await engine.runner.release();
  }
  // Chat names an adapter the same way.
  const chat = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify({ model: 'qv-r8', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
  });
  expect(chat.status, await chat.clone().text()).toBe(200);
});

it('an unknown adapter is 404 and a bad one 400, naming the file; the service serves on', async () => {
  const missing = await completion('no-such-adapter', 'x');
  expect(missing.status).toBe(404);
  const m = (await missing.json()) as { error: { param: string; code: string; message: string } };
  expect(m.error).toMatchObject({ param: 'model', code: 'model_not_found' });
  expect(m.error.message).toContain('adapters/no-such-adapter/adapter_config.json');

  const broken = await completion('broken-rank', 'x');
  expect(broken.status).toBe(400);
  const b = (await broken.json()) as { error: { type: string; param: string; code: string; message: string } };
  expect(b.error).toMatchObject({ type: 'invalid_request_error', param: 'model', code: 'invalid_adapter' });
  expect(b.error.message).toMatch(/adapters\/broken-rank\/adapter_config\.json has rank r = 128, over the limit of 64/);

  expect((await completion('bad name!', 'x')).status).toBe(404);
  expect((await completion('qv-r8', 'still served')).status).toBe(200);
});

it('a session may name an adapter: every turn runs on it; an unknown one is 404 at creation', async () => {
  const post = (path: string, body: unknown) =>
    fetch(`${server.url}${path}`, { method: 'POST', body: JSON.stringify(body) });
  const open = async (model: string) => {
    const res = await post('/v1/sessions', { model, defaults: { temperature: 0, max_tokens: 12, ignore_eos: true } });
    expect(res.status, await res.clone().text()).toBe(201);
    return (await res.json()) as { id: string; model: string };
  };
  const reply = async (id: string, content: string) => {
    const res = await post(`/v1/sessions/${id}/messages`, { content });
    expect(res.status, await res.clone().text()).toBe(200);
    return ((await res.json()) as { message: { content: string } }).message.content;
  };
  const onAdapter = await open('all-r16');
  const onBase = await open(BASE);
  expect(onAdapter.model).toBe('all-r16');
  for (const content of ['first turn', 'second turn']) {
    const [a, b] = await Promise.all([reply(onAdapter.id, content), reply(onBase.id, content)]);
    expect(a).not.toBe(b);
  }
  const unknown = await post('/v1/sessions', { model: 'no-such-adapter' });
  expect(unknown.status).toBe(404);
  expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
});

it("a hook may name an adapter: its jobs give that adapter's completion; an unknown one is 404 at PUT", async () => {
  const receiver = await startWebhookReceiver();
  try {
    const put = (name: string, config: Record<string, unknown>) =>
      fetch(`${server.url}/v1/hooks/${name}`, { method: 'PUT', body: JSON.stringify(config) });
    const params = { max_tokens: 8, temperature: 0 };
    const texts: Record<string, string> = {};
    for (const model of ['qv-r8', BASE]) {
      const secret = hookSecret();
      const box = await inbox(receiver.url, `lora-${model}`, secret);
      const hook = `say-${model}`;
      const res = await put(hook, {
        template: 'Say: {{ event.text }}',
        callback_url: box.url,
        secret,
        params,
        model,
        mode: 'completion',
      });
      expect(res.status, await res.clone().text()).toBe(201);
      expect((await sendEvent(server.url, hook, secret, { text: 'hello' })).status).toBe(202);
      for (let i = 0; i < 300 && (await box.deliveries()).length === 0; i++)
        await new Promise((r) => setTimeout(r, 100));
      const [delivery] = await box.deliveries();
      texts[model] = (JSON.parse(delivery.body) as { output: { text: string } }).output.text;
      const direct = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        body: JSON.stringify({ model, prompt: 'Say: hello', ...params }),
      });
      expect(texts[model]).toBe(((await direct.json()) as { choices: { text: string }[] }).choices[0].text);
    }
    expect(texts['qv-r8']).not.toBe(texts[BASE]);
    const unknown = await put('say-nothing', {
      template: 'x',
      callback_url: `${receiver.url}/nowhere`,
      secret: hookSecret(),
      model: 'no-such-adapter',
    });
    expect(unknown.status).toBe(404);
  } finally {
    await receiver.close();
  }
});

it("a response may name an adapter: the chat completion's answer, continued on it; an unknown one is 404", async () => {
  const post = (path: string, body: unknown) =>
    fetch(`${server.url}${path}`, { method: 'POST', body: JSON.stringify(body) });
  const res = await post('/v1/responses', { model: 'qv-r8', input: 'hi there', max_output_tokens: 8, temperature: 0 });
  expect(res.status, await res.clone().text()).toBe(200);
  const response = (await res.json()) as { id: string; model: string; output_text?: string; output: unknown[] };
  expect(response.model).toBe('qv-r8');
  const chat = await post('/v1/chat/completions', {
    model: 'qv-r8',
    messages: [{ role: 'user', content: 'hi there' }],
    max_tokens: 8,
    temperature: 0,
  });
  const text = ((await chat.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content;
  const output = (response.output as { type: string; content?: { text: string }[] }[]).find(
    (o) => o.type === 'message',
  );
  expect(output?.content?.[0].text).toBe(text);
  const next = await post('/v1/responses', {
    model: 'qv-r8',
    input: 'and again',
    previous_response_id: response.id,
    max_output_tokens: 4,
  });
  expect(next.status, await next.clone().text()).toBe(200);
  const unknown = await post('/v1/responses', { model: 'no-such-adapter', input: 'x' });
  expect(unknown.status).toBe(404);
});

// Structured outputs and tool calling end to end: `wrangler dev` (real workerd: xgrammar's wasm imported
// precompiled, no bytes compiled at run time) over real HTTP, spoken to by the official openai client.
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEY = 'e2e-key';
let server: DevServer;
let client: OpenAI;

beforeAll(async () => {
  server = await startDevServer({ API_KEYS: KEY });
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
});
afterAll(() => server?.stop());

const Weather = z.object({
  city: z.string().max(10),
  unit: z.enum(['celsius', 'fahrenheit']),
  days: z.number().int().min(1).max(7),
  alerts: z.array(z.string().max(6)).max(2),
});

const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      parameters: {
        type: 'object',
        properties: { zone: { type: 'string', maxLength: 6 } },
        required: ['zone'],
        additionalProperties: false,
      },
    },
  },
];
const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
  { role: 'user', content: 'What is the weather in Paris?' },
];

describe('structured outputs through the openai client', () => {
  it('chat.completions.parse() with a zod schema gives a parsed object', async () => {
    for (const seed of [1, 2, 3]) {
      const completion = await client.chat.completions.parse({
        model: 'tiny',
        messages,
        response_format: zodResponseFormat(Weather, 'weather'),
        temperature: 1,
        seed,
        max_tokens: 200,
      });
      const parsed = completion.choices[0].message.parsed;
      expect(parsed, completion.choices[0].message.content ?? '').not.toBeNull();
      expect(Weather.parse(parsed)).toEqual(parsed);
    }
  });

  it("vLLM's structured_outputs: a regex on completions, a choice on chat", async () => {
    const body = {
      model: 'tiny',
      prompt: 'Date:',
      temperature: 1,
      seed: 7,
      max_tokens: 40,
      n: 4,
      structured_outputs: { regex: '20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]' },
    };
    const completion = await client.completions.create(body as unknown as OpenAI.CompletionCreateParamsNonStreaming);
    for (const choice of completion.choices) expect(choice.text).toMatch(/^20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]$/);
    const chat = await client.chat.completions.create({
      model: 'tiny',
      messages,
      temperature: 1,
      seed: 3,
      structured_outputs: { choice: ['yes', 'no'] },
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(['yes', 'no']).toContain(chat.choices[0].message.content);
  });

  it('refuses what it cannot enforce with 400 in OpenAI’s error schema, naming the keyword', async () => {
    const bad = { type: 'object', properties: { n: { type: 'integer', multipleOf: 3 } } };
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        messages,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: bad } },
      }),
    });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { message: string; type: string; param: string; code: string } };
    expect(error.type).toBe('invalid_request_error');
    expect(error.code).toBe('unsupported_schema_feature');
    expect(error.param).toBe('response_format.json_schema.schema');
    expect(error.message).toContain("'multipleOf'");
    expect(error.message).not.toMatch(/\.cc\b|wasm|stack|\n\s+at /);
    const regex = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'x', structured_outputs: { regex: '(unclosed' } }),
    });
    expect(regex.status).toBe(400);
    expect(((await regex.json()) as { error: { param: string } }).error.param).toBe('structured_outputs.regex');
  });
});

describe('tool calls through the openai client', () => {
  it('a forced call comes back parsed, with finish_reason tool_calls', async () => {
    const completion = await client.chat.completions.create({
      model: 'tiny',
      messages,
      tools,
      tool_choice: 'required',
      temperature: 1,
      seed: 5,
      max_tokens: 200,
      parallel_tool_calls: false,
    });
    const choice = completion.choices[0];
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.type).toBe('function');
    expect(call.id).toMatch(/^call_/);
    expect(['get_weather', 'get_time']).toContain(call.function.name);
    expect(typeof JSON.parse(call.function.arguments)).toBe('object');
  });

  it('streams a named call as OpenAI does: id and name first, then fragments of arguments', async () => {
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages,
      tools,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      temperature: 1,
      seed: 9,
      max_tokens: 200,
      stream: true,
    });
    const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        deltas.push(...(c.delta.tool_calls ?? []));
        finish = c.finish_reason ?? finish;
      }
    }
    expect(finish).toBe('tool_calls');
    expect(deltas[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'get_weather', arguments: '' } });
    expect(deltas[0].id).toMatch(/^call_/);
    expect(deltas.length).toBeGreaterThan(2); // arguments arrive in pieces
    for (const d of deltas.slice(1)) expect(d.id).toBeUndefined();
    const args = JSON.parse(deltas.map((d) => d.function?.arguments ?? '').join('')) as { city: string; unit: string };
    expect(['celsius', 'fahrenheit']).toContain(args.unit);
    expect(args.city.length).toBeLessThanOrEqual(10);
  });

  // With tool_choice auto the model's own tool-call markers are parsed out of what it writes. A random
  // model never writes them by itself, so a regex (vLLM's structured_outputs) steers it into text, then a call.
  const AUTO = {
    structured_outputs: {
      regex:
        'Let me check\\.\\n<tool_call>\\n\\{"name": "get_weather", "arguments": \\{"city": "(Paris|Oslo)", "unit": "celsius"\\}\\}\\n</tool_call>',
    },
  };

  it('auto: a call the model writes itself is parsed out of its text', async () => {
    const completion = await client.chat.completions.create({
      model: 'tiny',
      messages,
      tools,
      temperature: 1,
      seed: 3,
      max_tokens: 200,
      ...AUTO,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const choice = completion.choices[0];
    expect(choice.finish_reason).toBe('tool_calls');
    // Whole, the content is trimmed of the blank lines around calls (as vLLM's Hermes parser); streamed, it went out as it came.
    expect(choice.message.content).toBe('Let me check.');
    const call = choice.message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toMatchObject({ unit: 'celsius' });
  });

  it("auto, streamed: content first, then the call in OpenAI's delta shape", async () => {
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages,
      tools,
      temperature: 1,
      seed: 3,
      max_tokens: 200,
      stream: true,
      ...AUTO,
    } as OpenAI.ChatCompletionCreateParamsStreaming);
    let content = '';
    let finish: string | null = null;
    const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        content += c.delta.content ?? '';
        deltas.push(...(c.delta.tool_calls ?? []));
        finish = c.finish_reason ?? finish;
      }
    }
    expect(content).toBe('Let me check.\n');
    expect(finish).toBe('tool_calls');
    expect(deltas[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'get_weather' } });
    expect(JSON.parse(deltas.map((d) => d.function?.arguments ?? '').join(''))).toMatchObject({ unit: 'celsius' });
  });

  it('a two-round tool conversation: the tool result goes back and the model answers', async () => {
    const first = await client.chat.completions.create({
      model: 'tiny',
      messages,
      tools,
      tool_choice: 'required',
      temperature: 1,
      seed: 11,
      max_tokens: 200,
    });
    const assistant = first.choices[0].message;
    expect(assistant.tool_calls?.length).toBeGreaterThan(0);
    const results: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = assistant.tool_calls!.map((call) => ({
      role: 'tool',
      tool_call_id: call.id,
      content: JSON.stringify({ temperature: 21 }),
    }));
    const second = await client.chat.completions.create({
      model: 'tiny',
      messages: [...messages, assistant, ...results],
      tools,
      tool_choice: 'none',
      temperature: 0,
      max_tokens: 16,
    });
    expect(second.choices[0].message.role).toBe('assistant');
    expect(second.choices[0].message.tool_calls).toBeUndefined();
    expect(['stop', 'length']).toContain(second.choices[0].finish_reason);
    // The history (assistant tool_calls, tool result) was rendered: the prompt grew by it. The functions
    // were not: with tool_choice "none" the model is not shown them, so it writes no call markup.
    const plain = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 1 });
    expect(second.usage!.prompt_tokens).toBeGreaterThan(plain.usage!.prompt_tokens);
    const withTools = await client.chat.completions.create({
      model: 'tiny',
      messages,
      tools,
      tool_choice: 'none',
      max_tokens: 1,
    });
    expect(withTools.usage!.prompt_tokens).toBe(plain.usage!.prompt_tokens);
    expect(second.choices[0].message.content).not.toContain('<tool_call');
  });
});

describe('metrics', () => {
  it('/metrics carries grammar compile times and cache hits', async () => {
    const body = { model: 'tiny', messages, max_tokens: 20, response_format: { type: 'json_object' } };
    for (let i = 0; i < 2; i++)
      await client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const text = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
    const total = (name: string): number =>
      text
        .split('\n')
        .filter((l) => l.startsWith(`${name}{`))
        .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    expect(text).toContain('# TYPE edge_infer_grammar_compile_seconds histogram');
    expect(total('edge_infer_grammar_compile_seconds_count')).toBeGreaterThan(0);
    expect(total('edge_infer_grammar_cache_hits_total')).toBeGreaterThan(0);
  });
});

describe('session turns', () => {
  it('a turn takes response_format; a session default takes vLLM’s choice', async () => {
    const call = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
      const res = await fetch(`${server.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status, await res.clone().text()).toBeLessThan(300);
      return (await res.json()) as Record<string, unknown>;
    };
    const session = await call('/v1/sessions', {
      system: 'Be brief.',
      defaults: { structured_outputs: { choice: ['left', 'right'] }, temperature: 1 },
    });
    const schema = {
      type: 'object',
      properties: { n: { type: 'integer', minimum: 1, maximum: 9 } },
      required: ['n'],
      additionalProperties: false,
    };
    const first = await call(`/v1/sessions/${String(session.id)}/messages`, {
      content: 'Pick a number.',
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema } },
    });
    const n = (JSON.parse((first.message as { content: string }).content) as { n: number }).n;
    expect(n).toBeGreaterThanOrEqual(1);
    expect(n).toBeLessThanOrEqual(9);
    const second = await call(`/v1/sessions/${String(session.id)}/messages`, { content: 'Which way?' });
    expect(['left', 'right']).toContain((second.message as { content: string }).content);
  });
});

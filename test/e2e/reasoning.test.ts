// Reasoning over HTTP: `wrangler dev` (real workerd) serving tiny-qwen3-think, a Qwen3-shaped model with
// Qwen3's real tokenizer and chat template whose greedy answer is `<think>ok</think>\n\nHello` (scripts/
// model/reasoning-model.ts), driven by the official openai client. The reasoning comes apart from the answer
// in chat completions (whole and streamed) and in responses; chat_template_kwargs reach the template; a JSON
// schema, json_object and a forced tool call constrain the answer after the reasoning, not the reasoning.
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS_DIR } from '../../scripts/ensure-models.js';
import { writeReasoningModel } from '../../scripts/model/reasoning-model.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEY = 'sk-reasoning';
const MODEL = 'tiny-qwen3-think';
let server: DevServer;
let client: OpenAI;

beforeAll(async () => {
  await writeReasoningModel(join(MODELS_DIR, MODEL));
  server = await startDevServer({ API_KEYS: KEY, MODEL });
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
}, 180_000);
afterAll(() => server?.stop());

type Message = OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string };
const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
  { role: 'user', content: 'Capital of France?' },
];
const chat = (extra: Record<string, unknown> = {}) =>
  client.chat.completions.create({ model: MODEL, messages, max_tokens: 16, temperature: 0, ...extra });

describe('reasoning in chat completions', () => {
  it('returns the thinking as reasoning_content and the answer as content', async () => {
    const completion = await chat();
    const message = completion.choices[0].message as Message;
    expect(message.reasoning_content).toBe('ok');
    expect(message.content).toBe('Hello');
    expect(completion.choices[0].finish_reason).toBe('stop');
  });

  it('streams delta.reasoning_content before delta.content, the same texts', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      max_tokens: 16,
      temperature: 0,
      stream: true,
    });
    let reasoning = '';
    let content = '';
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      if (delta?.reasoning_content) {
        expect(content).toBe(''); // no answer text before the reasoning is over
        reasoning += delta.reasoning_content;
      }
      content += delta?.content ?? '';
    }
    expect({ reasoning, content }).toEqual({ reasoning: 'ok', content: 'Hello' });
  });

  it('chat_template_kwargs enable_thinking: false reaches the template: no reasoning', async () => {
    const message = (await chat({ chat_template_kwargs: { enable_thinking: false } })).choices[0].message as Message;
    expect(message.reasoning_content ?? null).toBeNull();
    expect(message.content).toBe('Hello');
  });

  it('json_object and a JSON schema constrain the answer, after the reasoning', async () => {
    const schema = { type: 'object', properties: {}, additionalProperties: false };
    for (const response_format of [
      { type: 'json_object' },
      { type: 'json_schema', json_schema: { name: 'empty', schema, strict: true } },
    ]) {
      const message = (await chat({ response_format })).choices[0].message as Message;
      expect(message.reasoning_content).toBe('ok');
      expect(JSON.parse(message.content ?? '')).toEqual({});
    }
    // Without reasoning the grammar holds from the first token, as before.
    const plain = (
      await chat({ response_format: { type: 'json_object' }, chat_template_kwargs: { enable_thinking: false } })
    ).choices[0].message as Message;
    expect(plain.reasoning_content ?? null).toBeNull();
    expect(plain.content).toBe('{}');
  });

  it('a forced tool call comes after the reasoning', async () => {
    const completion = await chat({
      // The forced markup is written a character a token (ties go to the lowest id): ~60 tokens.
      max_tokens: 120,
      tools: [{ type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {} } } }],
      tool_choice: { type: 'function', function: { name: 'now' } },
    });
    const choice = completion.choices[0];
    expect((choice.message as Message).reasoning_content).toBe('ok');
    expect(choice.finish_reason).toBe('tool_calls');
    const call = choice.message.tool_calls?.[0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('now');
    expect(JSON.parse(call.function.arguments)).toEqual({});
    expect(choice.message.content ?? '').not.toContain('<tool_call>');
  });
});

describe('reasoning in responses', () => {
  it('gives a reasoning item, then the message; usage counts the reasoning tokens', async () => {
    const response = await client.responses.create({ model: MODEL, input: 'Capital of France?', temperature: 0 });
    const [reasoning, message] = response.output;
    expect(reasoning.type).toBe('reasoning');
    expect((reasoning as OpenAI.Responses.ResponseReasoningItem).content?.[0]?.text).toBe('ok');
    expect(message.type).toBe('message');
    expect(response.output_text).toBe('Hello');
    // <think>, "ok" and </think>.
    expect(response.usage?.output_tokens_details.reasoning_tokens).toBe(3);

    // The next turn re-renders without the reasoning (Qwen3's template drops it) and still answers.
    const next = await client.responses.create({
      model: MODEL,
      input: 'And of Italy?',
      previous_response_id: response.id,
      temperature: 0,
    });
    expect(next.output_text).toBe('Hello');
  });

  it('a JSON schema in text.format constrains the answer after the reasoning', async () => {
    const response = await client.responses.create({
      model: MODEL,
      input: 'Nothing, as JSON.',
      temperature: 0,
      text: {
        format: {
          type: 'json_schema',
          name: 'empty',
          schema: { type: 'object', properties: {}, additionalProperties: false },
        },
      },
    });
    expect(response.output[0].type).toBe('reasoning');
    expect(JSON.parse(response.output_text)).toEqual({});
  });
});

// The published Qwen3 and Gemma 3 chat templates rendered by our chat-template.ts against the Hugging Face
// reference, transformers.js's AutoTokenizer.apply_chat_template on the same two files (copied into a model
// folder by copyRealTokenizer, read with remote models off): the text, and the ids our chat encoding makes of
// it against the reference's tokenize: true.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyRealTokenizer, readRealTokenizer, type RealTokenizerName } from '../scripts/tokenizer/real-tokenizers.js';
import { encodeChat } from '../src/tokenizer/chat-encoding.js';
import { renderChat } from '../src/tokenizer/chat-template.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';

type Tjs = typeof import('@huggingface/transformers');
type HfTokenizer = Awaited<ReturnType<Tjs['AutoTokenizer']['from_pretrained']>>;

let root: string;
const reference = new Map<RealTokenizerName, HfTokenizer>();

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'real-chat-'));
  const tjs: Tjs = await import('@huggingface/transformers');
  tjs.env.allowRemoteModels = false;
  tjs.env.allowLocalModels = true;
  tjs.env.localModelPath = `${root}/`;
  for (const name of ['qwen3', 'gemma3'] as const) {
    copyRealTokenizer(name, join(root, name));
    reference.set(name, await tjs.AutoTokenizer.from_pretrained(name, { local_files_only: true }));
  }
}, 120_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The current weather in a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city'],
    },
  },
};

interface Conversation {
  what: string;
  messages: Record<string, unknown>[];
  tools?: unknown[];
  addGenerationPrompt?: boolean;
}

const CONVERSATIONS: Record<RealTokenizerName, Conversation[]> = {
  qwen3: [
    {
      what: 'system, two turns, generation prompt',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Hi there\n\nline two  with  spaces' },
        { role: 'assistant', content: 'Hello!' },
        { role: 'user', content: 'And 你好? 🤖' },
      ],
    },
    {
      what: 'tools, a tool call and its response',
      tools: [WEATHER_TOOL],
      messages: [
        { role: 'system', content: 'Use tools when they help.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: '', // not null: the template reads it as a string (`'</think>' in content`), in HF too
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 18, "sky": "clear"}' },
      ],
    },
    {
      what: 'tools, no system message, two calls and two responses',
      tools: [WEATHER_TOOL],
      messages: [
        { role: 'user', content: 'Paris and Oslo?' },
        {
          role: 'assistant',
          content: 'Checking both.',
          tool_calls: [
            { id: 'a', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
            {
              id: 'b',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city": "Oslo", "unit": "c"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'a', content: '18' },
        { role: 'tool', tool_call_id: 'b', content: '4' },
        { role: 'assistant', content: 'Paris 18, Oslo 4.' },
      ],
      addGenerationPrompt: false,
    },
    {
      what: 'an earlier answer with its thinking (dropped from history)',
      messages: [
        { role: 'user', content: 'What is 2+2?' },
        { role: 'assistant', content: '<think>\nadd them\n</think>\n\n4' },
        { role: 'user', content: 'And 3+3?' },
      ],
    },
  ],
  gemma3: [
    {
      what: 'a system message folded into the first user turn',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Hi there\n\nline two  with  spaces\n\tand a tab' },
        { role: 'assistant', content: 'Hello!\n\n- one\n- two' },
        { role: 'user', content: 'And 你好? 🤖' },
      ],
    },
    {
      what: 'no system message, content as one text part',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Describe <table> tags.' }] },
        { role: 'assistant', content: 'They hold rows.' },
        { role: 'user', content: 'Thanks!   ' },
      ],
    },
    {
      what: 'one turn, no generation prompt',
      messages: [{ role: 'user', content: 'Just this.' }],
      addGenerationPrompt: false,
    },
  ],
};

describe.each(['qwen3', 'gemma3'] as const)('%s chat template', (name) => {
  const { tokenizerJson, tokenizerConfig } = readRealTokenizer(name);
  const template = tokenizerConfig.chat_template as string;
  const ours = TextTokenizer.fromJson(tokenizerJson, tokenizerConfig);

  it.each(CONVERSATIONS[name])('renders as apply_chat_template: $what', (c) => {
    const hf = reference.get(name)!;
    const addGenerationPrompt = c.addGenerationPrompt ?? true;
    const options = {
      tokenize: false,
      add_generation_prompt: addGenerationPrompt,
      ...(c.tools ? { tools: c.tools } : {}),
    };
    const expected = hf.apply_chat_template(c.messages as never, options as never) as unknown as string;
    const text = renderChat(template, c.messages, tokenizerConfig, { addGenerationPrompt, tools: c.tools });
    expect(text).toBe(expected);
    if (c.tools) expect(text).toContain('"name": "get_weather"');

    // And the ids: our chat encoding against the reference's tokenization of the same conversation.
    const ids = hf.apply_chat_template(
      c.messages as never,
      {
        ...options,
        tokenize: true,
        return_tensor: false,
        return_dict: false,
      } as never,
    ) as unknown as number[];
    const render = (messages: unknown) =>
      renderChat(template, messages, tokenizerConfig, { addGenerationPrompt, tools: c.tools });
    expect(encodeChat(ours, c.messages, render)).toEqual(ids);
  });
});

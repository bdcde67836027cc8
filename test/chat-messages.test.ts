// The one chat-message validator: the edge (request-params.ts) and the chat template read messages through it,
// so text parts mean the same everywhere (joined with '\n', as vLLM does).
import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../src/engine/errors.js';
import { renderChat } from '../src/tokenizer/chat-template.js';
import { contentText, validateMessages } from '../src/tokenizer/chat-messages.js';
import { chatMessages } from '../src/worker/request-params.js';

const CHATML = '{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}';

function paramOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (err) {
    if (err instanceof InvalidRequestError) return err.param;
    throw err;
  }
  return undefined;
}

describe('chat messages', () => {
  it('joins text parts with a newline, at the edge and in the template alike', () => {
    const messages = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b' },
        ],
      },
    ];
    expect(chatMessages({ messages })).toEqual([{ role: 'user', content: 'a\nb' }]);
    expect(renderChat(CHATML, messages, {}, { addGenerationPrompt: false })).toBe('<|user|>a\nb\n');
    expect(renderChat(CHATML, chatMessages({ messages }), {}, { addGenerationPrompt: false })).toBe('<|user|>a\nb\n');
    expect(contentText([{ type: 'text', text: 'x' }], 'content')).toBe('x');
  });

  it('maps developer to system; an assistant may have null or no content, a user may not', () => {
    expect(
      validateMessages([
        { role: 'developer', content: 'r' },
        { role: 'assistant', content: null },
        { role: 'assistant' },
      ]),
    ).toEqual([
      { role: 'system', content: 'r' },
      { role: 'assistant', content: '' },
      { role: 'assistant', content: '' },
    ]);
    expect(paramOf(() => validateMessages([{ role: 'user', content: null }]))).toBe('messages[0].content');
    expect(paramOf(() => validateMessages([{ role: 'user' }]))).toBe('messages[0].content');
  });

  it.each([
    ['messages', undefined],
    ['messages', 'hi'],
    ['messages', []],
    ['messages[0]', ['hi']],
    ['messages[0]', [null]],
    ['messages[0].role', [{ content: 'x' }]],
    ['messages[0].tool_call_id', [{ role: 'tool', content: 'x' }]],
    ['messages[0].tool_calls', [{ role: 'user', content: 'x', tool_calls: [] }]],
    [
      'messages[0].tool_calls[0].function.arguments',
      [{ role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: {} } }] }],
    ],
    ['messages[0].role', [{ role: 'toString', content: 'x' }]],
    [
      'messages[1].content',
      [
        { role: 'user', content: 'x' },
        { role: 'user', content: 5 },
      ],
    ],
    [
      'messages[0].content[1]',
      [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'image_url', image_url: {} },
          ],
        },
      ],
    ],
    ['messages[0].content[0]', [{ role: 'user', content: [{ type: 'text', text: 7 }] }]],
    ['messages[0].content[0]', [{ role: 'user', content: [null] }]],
  ])('refuses a wrong %s, the same at the edge and in the template', (param, messages) => {
    expect(paramOf(() => chatMessages({ messages }))).toBe(param);
    expect(paramOf(() => renderChat(CHATML, messages))).toBe(param);
  });
});

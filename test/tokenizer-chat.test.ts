import { describe, expect, it } from 'vitest';
import { buildTokenizerFiles, CHAT_TEMPLATE } from '../scripts/tokenizer/build-tokenizer.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { renderChat } from '../src/tokenizer/chat-template.js';
import { InvalidRequestError } from '../src/engine/errors.js';

const files = buildTokenizerFiles({ vocabSize: 512 });
const config = files.tokenizerConfig as Record<string, unknown>;
const template = config.chat_template as string;

describe('renderChat', () => {
  it('renders ChatML exactly', () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hi there!' },
    ];
    expect(template).toBe(CHAT_TEMPLATE);
    expect(renderChat(template, messages, config)).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(renderChat(template, messages, config, { addGenerationPrompt: false })).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n',
    );
  });

  it('encodes to the special ids where the markers are', () => {
    const tok = TextTokenizer.fromJson(files.tokenizerJson, config);
    const ids = tok.encode(renderChat(template, [{ role: 'user', content: 'Hi 😀' }], config));
    expect(ids.filter((id) => id < 3)).toEqual([1, 2, 1]);
    expect(ids[0]).toBe(1);
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('user\nHi 😀\nassistant\n');
  });

  it('accepts text content parts and the developer role', () => {
    const out = renderChat(
      template,
      [
        { role: 'developer', content: 'Rules.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
      ],
      config,
    );
    expect(out).toBe('<|im_start|>system\nRules.<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n');
  });

  it('rejects malformed messages with InvalidRequestError on messages', () => {
    const bad: unknown[] = [
      'hello',
      [],
      [null],
      [{ content: 'x' }],
      [{ role: 'wizard', content: 'x' }],
      [{ role: 'user' }],
      [{ role: 'user', content: 42 }],
      [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
    ];
    for (const messages of bad) {
      let error: unknown;
      try {
        renderChat(template, messages, config);
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(messages)).toBeInstanceOf(InvalidRequestError);
      // The param names the field at fault (messages, messages[0].role, ...), as the edge's errors do.
      expect((error as InvalidRequestError).param).toMatch(/^messages(\[\d+\]|$)/);
    }
  });
});

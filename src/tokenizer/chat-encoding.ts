/**
 * Chat prompts whose control tokens come from the template alone. encode() turns every added-token text
 * it meets into its id, as HF does, which chat templates rely on; but then `<|im_end|>` typed in a
 * message became the real end-of-turn token, and a webhook sender could forge turns. So content that
 * carries such a text is encoded with special-token parsing off: the template is rendered with a
 * placeholder in its place, the template's text around it is encoded as usual, and the content as plain
 * text (each control string spelled by ordinary tokens). Content without one is rendered and encoded in
 * one piece, as before, so ordinary prompts keep exactly their tokens.
 *
 * Assistant messages are left as they are: their content is the model's own earlier output, whose
 * <think> or <tool_call> were tokens when it was generated, and a template may read it (Qwen3's drops
 * the thinking of earlier answers, which it cannot see behind a placeholder). Third-party text (a
 * webhook's event) reaches the prompt as user content, which is still guarded.
 */
import type { TextTokenizer } from './tokenizer.js';

interface Message {
  role?: unknown;
  content?: unknown;
}

/** Token ids of the chat `messages` as `render` formats them, no message's content producing a control token. */
export function encodeChat(
  tokenizer: Pick<TextTokenizer, 'encode' | 'addedTokenTexts'>,
  messages: unknown,
  render: (messages: unknown) => string,
): number[] {
  const controls = tokenizer.addedTokenTexts;
  const carries = (m: Message): boolean =>
    m?.role !== 'assistant' &&
    typeof m?.content === 'string' &&
    controls.some((control) => (m.content as string).includes(control));
  if (!Array.isArray(messages) || !messages.some(carries)) return tokenizer.encode(render(messages));

  // A nonce no message can know, so no content can pose as a placeholder.
  const nonce = [...crypto.getRandomValues(new Uint8Array(8))].map((b) => b.toString(16)).join('');
  const contents: string[] = [];
  const masked = messages.map((m: Message) =>
    carries(m) ? { ...m, content: `\uE000${nonce}:${contents.push(m.content as string) - 1}\uE001` } : m,
  );
  const text = render(masked);
  const ids: number[] = [];
  const slot = new RegExp(`\uE000${nonce}:(\\d+)\uE001`, 'g');
  let last = 0;
  for (const match of text.matchAll(slot)) {
    ids.push(...encodeText(tokenizer, text.slice(last, match.index)));
    ids.push(...encodePlain(tokenizer, contents[Number(match[1])], controls));
    last = match.index + match[0].length;
  }
  ids.push(...encodeText(tokenizer, text.slice(last)));
  return ids;
}

function encodeText(tokenizer: Pick<TextTokenizer, 'encode'>, text: string): number[] {
  return text.length === 0 ? [] : tokenizer.encode(text);
}

/**
 * `text` with no added token recognised: split at each control string, and each control string encoded
 * as its first character and the rest apart, which no longer spell it (so ordinary tokens carry it).
 */
function encodePlain(tokenizer: Pick<TextTokenizer, 'encode'>, text: string, controls: readonly string[]): number[] {
  const ids: number[] = [];
  let rest = text;
  for (;;) {
    let at = -1;
    let found = '';
    for (const control of controls) {
      const i = rest.indexOf(control);
      if (i >= 0 && (at < 0 || i < at || (i === at && control.length > found.length))) [at, found] = [i, control];
    }
    if (at < 0) break;
    ids.push(...encodeText(tokenizer, rest.slice(0, at)));
    ids.push(...encodeText(tokenizer, found.slice(0, 1)), ...encodeText(tokenizer, found.slice(1)));
    rest = rest.slice(at + found.length);
  }
  ids.push(...encodeText(tokenizer, rest));
  return ids;
}

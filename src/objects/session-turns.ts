/**
 * How a chat session's token log grows, turn by turn, using only the model's own chat template (through
 * Engine.resolve). The log is the exact token sequence the model has seen, so each turn can continue the
 * session's KV cache and prefill only what is new: the user's message segment, plus the end-of-turn
 * marker after the previous reply.
 *
 * Templates that render each message on its own (ChatML and most others) give, for messages m1..mk,
 * seg(m1) + ... + seg(mk) + G, where G is the assistant generation prompt. We learn G and the footer that
 * closes an assistant message by rendering two tiny probes once per engine, so nothing here spells
 * ChatML's markers.
 */
import type { Engine } from '../engine/engine.js';
import type { DoneEvent } from '../engine/sequence-output.js';
import type { ChatMessage } from '../engine/request.js';

export interface TurnFormat {
  /** Tokens closing an assistant message (ChatML: `<|im_end|>` `\n`). */
  footer: number[];
}

const formats = new WeakMap<Engine, TurnFormat>();

const promptIds = (engine: Engine, messages: ChatMessage[]): number[] =>
  engine.resolve({ messages, max_tokens: 1 }).promptIds;

const equal = (a: readonly number[], b: readonly number[]): boolean =>
  a.length === b.length && a.every((x, i) => x === b[i]);

/** The engine's turn format; throws if its template does not render messages independently. */
export function turnFormat(engine: Engine): TurnFormat {
  let format = formats.get(engine);
  if (format) return format;
  const probe = 'ok';
  const one = promptIds(engine, [{ role: 'user', content: probe }]);
  const two = promptIds(engine, [
    { role: 'user', content: probe },
    { role: 'user', content: probe },
  ]);
  const segment = two.length - one.length;
  const generationPrompt = one.slice(segment);
  if (segment <= 0 || !equal(two.slice(segment), one) || !equal(two.slice(0, segment), one.slice(0, segment))) {
    throw new Error("this model's chat template does not render messages one by one; sessions cannot extend it");
  }
  const assistant = promptIds(engine, [{ role: 'assistant', content: probe }]);
  const message = assistant.slice(0, assistant.length - generationPrompt.length);
  const content = engine.tokenizer.encode(probe);
  let at = -1;
  for (let i = message.length - content.length; i >= 0 && at < 0; i--) {
    if (equal(message.slice(i, i + content.length), content)) at = i;
  }
  if (at < 0) throw new Error("cannot find where this model's chat template closes an assistant message");
  format = { footer: message.slice(at + content.length) };
  formats.set(engine, format);
  return format;
}

/**
 * Tokens the new user message adds to the log: the whole first prompt (system message, if any, and the
 * user message) when the log is empty, otherwise the user's segment and the generation prompt.
 * Throws InvalidRequestError for bad content.
 */
export function userTurnIds(engine: Engine, logLength: number, system: string | null, content: string): number[] {
  const messages: ChatMessage[] = logLength === 0 && system !== null ? [{ role: 'system', content: system }] : [];
  messages.push({ role: 'user', content });
  return promptIds(engine, messages);
}

/**
 * Tokens the assistant's reply adds to the log once it has finished: what the model generated, closed
 * by the template's footer (the EOS token that ended it already is the footer's first token). A reply
 * cut by a stop string generated tokens past it that the user never sees; those are replaced by the
 * visible text, so the log matches the transcript.
 */
export function replyIds(engine: Engine, done: DoneEvent): number[] {
  const { footer } = turnFormat(engine);
  const ids = done.stopReason === 'string' ? engine.tokenizer.encode(done.text) : [...done.tokenIds];
  if (ids.length > 0 && ids[ids.length - 1] === footer[0]) return [...ids, ...footer.slice(1)];
  return [...ids, ...footer];
}

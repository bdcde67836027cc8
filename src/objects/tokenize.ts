import type { Engine } from '../engine/engine.js';
import { invalidRequest, fail, ok, type RpcResult } from './rpc-error.js';

/** POST /tokenize's answer, in vLLM's shape. */
export interface Tokenized {
  tokens: number[];
  count: number;
  max_model_len: number;
}

/**
 * A prompt's ids as the completions route gets them (add_special_tokens: what the tokenizer's post-processor
 * adds, vLLM's default) or bare, with the model's context length.
 */
export function tokenizeWith(engine: Engine, prompt: string, addSpecialTokens: boolean): RpcResult<Tokenized> {
  const tokens = addSpecialTokens ? engine.tokenizer.encodePrompt(prompt) : engine.tokenizer.encode(prompt);
  return ok({ tokens, count: tokens.length, max_model_len: engine.config.maxPositionEmbeddings });
}

/** POST /detokenize: the text of `tokens`; an id outside the vocabulary is the client's 400, naming it. */
export function detokenizeWith(engine: Engine, tokens: readonly number[]): RpcResult<{ prompt: string }> {
  const vocab = engine.tokenizer.vocabSize;
  const bad = tokens.find((id) => !Number.isSafeInteger(id) || id < 0 || id >= vocab);
  if (bad !== undefined)
    return fail(invalidRequest(`token id ${bad} is outside the vocabulary [0, ${vocab})`, 'tokens'));
  return ok({ prompt: engine.tokenizer.decode(tokens) });
}

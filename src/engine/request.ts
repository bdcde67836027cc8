import { InvalidRequestError } from './errors.js';

/** A chat message as OpenAI's API carries it. */
export interface ChatMessage {
  role: string;
  content: string;
}

/**
 * A generation request in OpenAI's spelling (snake_case), so the service can pass API fields through.
 * Exactly one of `prompt`, `prompt_ids` and `messages` is given.
 */
export interface GenerationRequest {
  prompt?: string;
  /** Token ids, fed as they are (no template, no BOS added). */
  prompt_ids?: readonly number[];
  /** Rendered with the model's chat template, with the assistant generation prompt appended. */
  messages?: readonly ChatMessage[];
  /** Completions to generate (OpenAI's `n`): the prompt is prefilled once and forked copy-on-write. Default 1. */
  n?: number;
  /** Completion tokens at most; default: min(DEFAULT_MAX_TOKENS, room left in the context window). */
  max_tokens?: number;
  stop?: string | readonly string[] | null;
  /** Extra token ids that end the generation (besides the model's EOS ids). */
  stop_token_ids?: readonly number[];
  /** Keep going past EOS (benchmarks). */
  ignore_eos?: boolean;
  temperature?: number;
  top_k?: number;
  top_p?: number;
  min_p?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  repetition_penalty?: number;
  logit_bias?: Record<string, number> | null;
  seed?: number | null;
  logprobs?: boolean;
  top_logprobs?: number;
}

export const DEFAULT_MAX_TOKENS = 256;

export function isNonNegativeInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/** Checks token ids before anything runs: a non-empty list of integers inside the model's vocabulary. */
export function checkTokenIds(ids: readonly unknown[], vocabSize: number, param: string): number[] {
  if (ids.length === 0) throw new InvalidRequestError(param, `${param} must not be empty`);
  ids.forEach((id, i) => {
    if (!isNonNegativeInt(id) || id >= vocabSize) {
      throw new InvalidRequestError(param, `${param}[${i}] = ${String(id)} is not a token id in [0, ${vocabSize})`);
    }
  });
  return ids as number[];
}

/** Resolves max_tokens against the prompt and the context window; refuses what can never fit. */
export function resolveMaxTokens(maxTokens: unknown, promptLength: number, contextWindow: number): number {
  const room = contextWindow - promptLength;
  if (room <= 0) {
    throw new InvalidRequestError(
      'prompt',
      `the prompt is ${promptLength} tokens; this model's context window is ${contextWindow} tokens and leaves no room to generate`,
      'context_length_exceeded',
    );
  }
  if (maxTokens === undefined || maxTokens === null) return Math.min(DEFAULT_MAX_TOKENS, room);
  if (typeof maxTokens !== 'number' || !Number.isSafeInteger(maxTokens) || maxTokens < 1) {
    throw new InvalidRequestError('max_tokens', `max_tokens must be an integer >= 1, got ${JSON.stringify(maxTokens)}`);
  }
  if (maxTokens > room) {
    throw new InvalidRequestError(
      'max_tokens',
      `prompt (${promptLength} tokens) + max_tokens (${maxTokens}) exceeds the context window of ${contextWindow} tokens`,
      'context_length_exceeded',
    );
  }
  return maxTokens;
}

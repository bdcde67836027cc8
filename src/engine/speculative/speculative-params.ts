import { InvalidRequestError } from '../errors.js';

export type SpeculativeMethod = 'ngram' | 'draft';
export const SPECULATIVE_METHODS: readonly SpeculativeMethod[] = ['ngram', 'draft'];
/** Proposals verified in one pass at most: past this, a rejected early token wastes most of the pass. */
export const MAX_SPECULATIVE_TOKENS = 16;

/** How a request speculates: who proposes, and how many tokens per step (γ). */
export interface SpeculativeParams {
  method: SpeculativeMethod;
  numTokens: number;
}

/**
 * Reads `speculative: { method, num_tokens }` (null or absent: no speculation). `draft` needs the engine
 * to have a draft model; `fallback` is the engine's default, used when the request names none. `name`
 * is what errors call the setting (a server var checks its value with the same rules).
 */
export function resolveSpeculativeParams(
  input: unknown,
  hasDraftModel: boolean,
  fallback: SpeculativeParams | undefined,
  name = 'speculative',
): SpeculativeParams | undefined {
  if (input === undefined) return fallback;
  if (input === null) return undefined;
  if (typeof input !== 'object' || Array.isArray(input)) {
    throw new InvalidRequestError(name, `${name} must be an object { method: "ngram" | "draft", num_tokens } or null`);
  }
  const { method, num_tokens: numTokens, ...rest } = input as Record<string, unknown>;
  const unknown = Object.keys(rest)[0];
  if (unknown !== undefined) throw new InvalidRequestError(`${name}.${unknown}`, `unknown field ${name}.${unknown}`);
  if (typeof method !== 'string' || !(SPECULATIVE_METHODS as readonly string[]).includes(method)) {
    throw new InvalidRequestError(
      `${name}.method`,
      `${name}.method must be "ngram" or "draft", got ${JSON.stringify(method)}`,
    );
  }
  if (method === 'draft' && !hasDraftModel) {
    throw new InvalidRequestError(
      `${name}.method`,
      'no draft model is loaded here; use "ngram" (prompt lookup), or load one (DRAFT_MODEL, --draft-model)',
      'draft_model_unavailable',
    );
  }
  if (
    typeof numTokens !== 'number' ||
    !Number.isSafeInteger(numTokens) ||
    numTokens < 1 ||
    numTokens > MAX_SPECULATIVE_TOKENS
  ) {
    throw new InvalidRequestError(
      `${name}.num_tokens`,
      `${name}.num_tokens must be an integer in [1, ${MAX_SPECULATIVE_TOKENS}], got ${JSON.stringify(numTokens)}`,
    );
  }
  return { method: method as SpeculativeMethod, numTokens };
}

/**
 * vLLM's `prompt_logprobs`: the model's log-probability of each prompt token given the tokens before it,
 * with its rank in the vocabulary and the `top` most likely alternatives. The first token has none (null).
 * Recorded from the logits the prefill computes anyway, so a request asking for them skips the prefix cache.
 */
import { InvalidRequestError } from '../errors.js';
import { logSumExp, topLogprobs, type TokenLogprob } from './logprobs.js';
import { MAX_TOP_LOGPROBS } from './sampling-params.js';

export interface PromptTokenLogprob extends TokenLogprob {
  /** 1 + how many tokens the model found more likely. */
  rank: number;
  top: TokenLogprob[];
}

/** The request's `prompt_logprobs`: undefined when not asked, else the number of alternatives per token. */
export function resolvePromptLogprobs(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || value > MAX_TOP_LOGPROBS)
    throw new InvalidRequestError(
      'prompt_logprobs',
      `prompt_logprobs must be an integer in [0, ${MAX_TOP_LOGPROBS}], got ${JSON.stringify(value)}`,
    );
  return value;
}

/** Log-probability, rank and alternatives of `tokenId` in one row of logits (the model's raw distribution). */
export function promptTokenLogprob(logits: Float32Array, tokenId: number, top: number): PromptTokenLogprob {
  const lse = logSumExp(logits);
  const value = logits[tokenId];
  let above = 0;
  for (let i = 0; i < logits.length; i++) if (logits[i] > value) above++;
  return { tokenId, logprob: value - lse, rank: above + 1, top: topLogprobs(logits, top, lse) };
}

/** A prompt's log-probabilities as its prefill computes them, chunk by chunk (positions may be recomputed). */
export class PromptLogprobs {
  /** Entry p is prompt token p's; entry 0 stays null. */
  readonly entries: (PromptTokenLogprob | null)[];

  constructor(
    private readonly promptIds: readonly number[],
    private readonly top: number,
  ) {
    this.entries = promptIds.map(() => null);
  }

  /** `logitsAt(j)`: the logits after the token at position start + j, which predict position start + j + 1. */
  record(start: number, count: number, logitsAt: (j: number) => Float32Array): void {
    for (let j = 0; j < count; j++) {
      const target = start + j + 1;
      if (target >= this.promptIds.length) return;
      this.entries[target] = promptTokenLogprob(logitsAt(j), this.promptIds[target], this.top);
    }
  }
}

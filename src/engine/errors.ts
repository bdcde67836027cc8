import { InvalidRequestError } from '../invalid-request.js';

export { InvalidRequestError };

/** Thrown where a request can never be served by this model (e.g. prompt + max_tokens past the window). */
export class CapacityError extends InvalidRequestError {}

/**
 * One sequence could not go on: its grammar reached a dead end, its sampler or detokenizer threw, or its
 * row of a model pass failed when run alone. Its request ends with this error; every other sequence in
 * the batch goes on as if it had never been there (vLLM and TGI abort one request the same way).
 */
export class SequenceFailedError extends Error {
  override readonly name = 'SequenceFailedError';
  constructor(
    message: string,
    /** Machine-readable reason: `grammar_dead_end` or `generation_failed`. */
    readonly code: 'grammar_dead_end' | 'generation_failed',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

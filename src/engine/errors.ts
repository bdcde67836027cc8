/**
 * Typed errors the engine raises for bad requests. The service maps them onto OpenAI's error schema,
 * so each names the offending parameter and a stable code; nothing is computed before they are thrown.
 */
export class InvalidRequestError extends Error {
  override readonly name = 'InvalidRequestError';
  constructor(
    /** The request field at fault, in OpenAI's spelling (e.g. `top_p`, `max_tokens`, `prompt`). */
    readonly param: string,
    message: string,
    /** Machine-readable reason, e.g. `invalid_value`, `context_length_exceeded`. */
    readonly code: string = 'invalid_value',
  ) {
    super(message);
  }
}

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

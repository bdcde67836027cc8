/**
 * A bad request, as the engine and the tokenizer refuse it. The service maps them onto OpenAI's error schema,
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

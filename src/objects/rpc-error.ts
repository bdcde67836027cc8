import { InvalidRequestError, SequenceFailedError } from '../engine/errors.js';
import { RunnerUnavailableError } from '../engine/runners/runner-unavailable.js';
import type { RateLimitState } from './tenancy/rate-limiter.js';

/**
 * An error meant for the client, as it crosses the worker→object RPC boundary. Exceptions thrown across
 * RPC lose their class and fields, so object methods return these as values and the worker turns them
 * into OpenAI error bodies (src/worker/errors.ts `unwrap`).
 */
export interface ServiceError {
  status: 400 | 401 | 403 | 404 | 408 | 409 | 413 | 429 | 500 | 503;
  message: string;
  type: string;
  param: string | null;
  code: string | null;
  /** A key's rate limits (a 429 for them): the worker sends them as x-ratelimit-* and retry-after headers. */
  rateLimit?: RateLimitState;
  /** Seconds after which the same request may succeed (a GPU host that is down): the worker sends retry-after. */
  retryAfterSeconds?: number;
}

export type RpcResult<T> = { ok: true; value: T } | { ok: false; error: ServiceError };

export const ok = <T>(value: T): RpcResult<T> => ({ ok: true, value });
export const fail = (error: ServiceError): RpcResult<never> => ({ ok: false, error });

export function invalidRequest(
  message: string,
  param: string | null = null,
  code: string | null = 'invalid_value',
): ServiceError {
  return { status: 400, type: 'invalid_request_error', message, param, code };
}

/** Engine validation errors become 400s naming the parameter; anything else is a bug and is rethrown. */
export function fromEngineError(err: unknown): ServiceError {
  if (err instanceof InvalidRequestError)
    return err.code === 'model_not_found'
      ? { ...invalidRequest(err.message, err.param, err.code), status: 404 }
      : invalidRequest(err.message, err.param, err.code);
  throw err;
}

/**
 * A generation that failed while it ran. One whose sequence failed alone (SequenceFailedError) says why: a
 * grammar that reached a dead end is the request's own (400), any other failure of that sequence a 500
 * naming it. Anything else is an engine failure, told only as `internal_error`.
 */
export function fromGenerationError(err: unknown): ServiceError {
  const away = RunnerUnavailableError.in(err);
  if (away) return runnerUnavailable(away);
  if (err instanceof SequenceFailedError)
    return err.code === 'grammar_dead_end'
      ? invalidRequest(err.message, null, err.code)
      : { status: 500, type: 'server_error', message: err.message, param: null, code: err.code };
  return { status: 500, type: 'server_error', message: 'the generation failed', param: null, code: 'internal_error' };
}

/**
 * A 503 for what runs the model (a GPU host, a pipeline stage) that cannot be reached: the request may be sent
 * again once it is back, so it says when (Retry-After), as a model that is not loaded does (model-unavailable.ts).
 */
export function runnerUnavailable(err: RunnerUnavailableError): ServiceError {
  return {
    status: 503,
    type: 'server_error',
    message: `${err.message}; try again in ${err.retryAfterSeconds} s`,
    param: null,
    code: err.code,
    retryAfterSeconds: err.retryAfterSeconds,
  };
}

import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { InvalidRequestError } from '../engine/errors.js';
import type { RpcResult, ServiceError } from '../objects/rpc-error.js';
import { rateLimitHeaders } from './rate-limit-headers.js';

/**
 * OpenAI's error schema: `{"error":{"message","type","param","code"}}`. Handlers throw ApiError (or
 * return an object's ServiceError through `unwrap`); app.onError renders it. 500 is kept for bugs.
 */
export class ApiError extends Error {
  constructor(
    readonly status: ServiceError['status'],
    message: string,
    readonly type: string = 'invalid_request_error',
    readonly param: string | null = null,
    readonly code: string | null = null,
    /** Sent with the error (a 429's x-ratelimit-* and retry-after). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  static from(e: ServiceError): ApiError {
    const retry: Record<string, string> =
      e.retryAfterSeconds === undefined ? {} : { 'retry-after': String(e.retryAfterSeconds) };
    return new ApiError(e.status, e.message, e.type, e.param, e.code, { ...rateLimitHeaders(e.rateLimit), ...retry });
  }

  get body(): { error: Omit<ServiceError, 'status'> } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** A 400 for a request field of the wrong JSON type or shape. */
export const badParam = (param: string, message: string, code = 'invalid_type'): ApiError =>
  new ApiError(400, message, 'invalid_request_error', param, code);

/** The value of an object's RPC result, or the ApiError it carries. */
export function unwrap<T>(result: RpcResult<T>): T {
  if (!result.ok) throw ApiError.from(result.error);
  return result.value;
}

export function errorResponse(c: Context, err: ApiError): Response {
  return c.json(err.body, err.status as ContentfulStatusCode, err.headers);
}

/** app.onError: known errors keep their status; anything else is logged and answered with a generic 500. */
export function handleError(err: Error, c: Context): Response {
  if (err instanceof ApiError) return errorResponse(c, err);
  // The client went away mid-request (its generation was cancelled): nobody reads this answer.
  if (c.req.raw.signal?.aborted) return new Response(null, { status: 499 });
  if (err instanceof InvalidRequestError)
    return errorResponse(c, new ApiError(400, err.message, 'invalid_request_error', err.param, err.code));
  console.error('unhandled error', err);
  return errorResponse(c, new ApiError(500, 'internal error', 'server_error', null, 'internal_error'));
}

export function notFound(c: Context): Response {
  return errorResponse(
    c,
    new ApiError(
      404,
      `no route for ${c.req.method} ${new URL(c.req.url).pathname}`,
      'invalid_request_error',
      null,
      'not_found',
    ),
  );
}

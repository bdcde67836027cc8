import type { Context } from 'hono';
import { intVar, type Env } from '../env.js';
import { discardBody } from './body-discard.js';
import { ApiError } from './errors.js';
import { JsonDepthError, readJsonText } from '../json-limits.js';

export type JsonObject = Record<string, unknown>;

function tooLarge(limit: number): ApiError {
  return new ApiError(
    413,
    `request body is larger than ${limit} bytes`,
    'invalid_request_error',
    null,
    'request_too_large',
  );
}

/**
 * The request body's bytes, read under MAX_BODY_BYTES: refused early by Content-Length, and also counted
 * while reading, since a chunked body has no length to trust. A refused body is finished before the 413
 * goes (see body-discard.ts).
 */
export async function readBodyBytes<E extends { Bindings: Env }>(c: Context<E>): Promise<Uint8Array> {
  const limit = intVar(c.env, 'MAX_BODY_BYTES');
  const declared = Number(c.req.header('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > limit) {
    const body = c.req.raw.body;
    if (body) await discardBody(body.getReader());
    throw tooLarge(limit);
  }

  const chunks: Uint8Array[] = [];
  let size = 0;
  const body = c.req.raw.body;
  if (body) {
    const reader = body.getReader();
    // A body whose Content-Length is more than is sent held the request until the client gave up.
    const timeoutMs = intVar(c.env, 'BODY_READ_TIMEOUT_MS');
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const next = await beforeDeadline(reader.read(), deadline);
      if (next === 'late') {
        await discardBody(reader, 100, 100);
        throw new ApiError(
          408,
          `the request body did not arrive within ${timeoutMs} ms (BODY_READ_TIMEOUT_MS)`,
          'invalid_request_error',
          null,
          'request_timeout',
        );
      }
      const { done, value } = next;
      if (done) break;
      size += value.byteLength;
      if (size > limit) {
        await discardBody(reader);
        throw tooLarge(limit);
      }
      chunks.push(value);
    }
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}

/** `read`, or 'late' once `deadline` (epoch ms) has passed without it. */
async function beforeDeadline<T>(read: Promise<T>, deadline: number): Promise<T | 'late'> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), deadline - Date.now())));
  return Promise.race([read, late]).finally(() => clearTimeout(timer));
}

/** The request body (see readBodyBytes) as a JSON object. */
export async function readJsonObject<E extends { Bindings: Env }>(c: Context<E>): Promise<JsonObject> {
  const bytes = await readBodyBytes(c);
  let parsed: unknown;
  try {
    parsed = readJsonText(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (err) {
    if (err instanceof JsonDepthError)
      throw new ApiError(400, `the request body ${err.message}`, 'invalid_request_error', null, 'json_too_deep');
    const why = err instanceof Error ? err.message : String(err);
    throw new ApiError(
      400,
      `the request body is not valid JSON: ${why}`,
      'invalid_request_error',
      null,
      'invalid_json',
    );
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ApiError(400, 'the request body must be a JSON object', 'invalid_request_error', null, 'invalid_json');
  }
  return parsed as JsonObject;
}

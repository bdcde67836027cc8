import type { GenerationRequest } from '../engine/request.js';
import type { Env } from '../env.js';
import type { WireEvent } from '../objects/generation.js';
import { unwrap } from './errors.js';
import { shardStub } from './routing.js';

export type DoneWire = Extract<WireEvent, { type: 'done' }>;
export type TokenWire = Extract<WireEvent, { type: 'token' }>;

/** A running generation as the worker sees it: its events, and a way to stop it. */
export interface Generation {
  events: AsyncIterable<WireEvent>;
  /** Cancels the engine requests (idempotent; a no-op once the generation finished). */
  cancel(): void;
}

/** Splits the object's NDJSON byte stream into events. */
async function* ndjson(reader: ReadableStreamDefaultReader<Uint8Array>): AsyncGenerator<WireEvent> {
  const decoder = new TextDecoder();
  let buffered = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (line.length > 0) yield JSON.parse(line) as WireEvent;
    }
  }
}

export interface StartOptions {
  /** The incoming request's signal: aborted when the client disconnects (compat flag enable_request_signal). */
  signal?: AbortSignal;
  /** The request's ctx.waitUntil, so the cancel RPC outlives the request context a disconnect tears down. */
  waitUntil?: (promise: Promise<unknown>) => void;
}

/**
 * Starts `requests` on `shard`; client errors from the object surface as ApiError. Cancelling (client
 * gone, or the SSE stream cancelled) cancels the stream reader and also tells the object by RPC, since a
 * disconnect can drop the RPC stream without the object ever seeing it cancelled.
 */
export async function startGeneration(env: Env, shard: number, requests: GenerationRequest[], options: StartOptions = {}): Promise<Generation> {
  const stub = shardStub(env, shard);
  const { id, stream } = unwrap(await stub.generate(requests));
  const reader = stream.getReader();
  let finished = false;
  let cancelled = false;
  const cancel = (): void => {
    if (cancelled || finished) return;
    cancelled = true;
    const told = stub.cancel(id).catch(() => false);
    if (options.waitUntil) options.waitUntil(told);
    void reader.cancel().catch(() => {});
  };
  if (options.signal?.aborted) cancel();
  options.signal?.addEventListener('abort', cancel, { once: true });
  async function* events(): AsyncGenerator<WireEvent> {
    let complete = false;
    try {
      for await (const event of ndjson(reader)) yield event;
      complete = true;
    } catch (err) {
      // A read that fails because we cancelled is the end of the stream, not an error.
      if (!cancelled) throw err;
    } finally {
      if (complete) finished = true;
      else cancel();
    }
  }
  return { events: events(), cancel };
}

/** The waitUntil of a Hono context, when it has an execution context (app.fetch called without one has not). */
export function waitUntilOf(c: { executionCtx: { waitUntil(promise: Promise<unknown>): void } }): ((p: Promise<unknown>) => void) | undefined {
  try {
    const ctx = c.executionCtx;
    return (p) => ctx.waitUntil(p);
  } catch {
    return undefined;
  }
}

/** Per-choice results of a finished generation, for non-streamed responses. */
export interface Collected {
  tokens: TokenWire[][];
  done: DoneWire[];
}

export async function collect(generation: Generation, count: number): Promise<Collected> {
  const result: Collected = { tokens: Array.from({ length: count }, () => []), done: [] };
  for await (const event of generation.events) {
    if (event.type === 'error') throw new Error(`generation failed: ${event.message}`);
    if (event.type === 'token') result.tokens[event.index].push(event);
    else result.done[event.index] = event;
  }
  if (result.done.filter(Boolean).length !== count) throw new Error('generation ended before every choice finished');
  return result;
}

/** `n` copies of each request, choice i of a seeded request seeded with seed + i so the choices differ. */
export function fanOut(requests: GenerationRequest[], n: number): GenerationRequest[] {
  return requests.flatMap((request) =>
    Array.from({ length: n }, (_, i) => (typeof request.seed === 'number' && i > 0 ? { ...request, seed: request.seed + i } : request)),
  );
}

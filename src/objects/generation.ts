import type { Engine, GenerateOptions } from '../engine/engine.js';
import type { GenerationRequest } from '../engine/request.js';
import type { DoneEvent, FinishReason, GenerationEvent, TopLogprob } from '../engine/sequence.js';
import type { RequestMetrics } from '../engine/metrics.js';
import type { ServiceMetrics } from './metrics.js';

/**
 * One generation run by an object for the worker: one or more engine requests (OpenAI's `n`, or a batch
 * of prompts) merged into one byte stream of newline-delimited JSON events. Workers RPC carries only byte
 * streams, hence NDJSON; HTTP framing (SSE, OpenAI shapes) stays in the worker.
 * Cancelling the stream (the client went away) aborts every engine request in it, which frees their blocks.
 */

/** A token's logprob with the token spelled out, since the worker has no tokenizer. */
export interface WireLogprob {
  token: string;
  logprob: number;
  /** The token's UTF-8 bytes (a token may hold part of a character). */
  bytes: number[];
}

export type WireEvent =
  | { type: 'token'; index: number; tokenId: number; text: string; logprob?: WireLogprob & { top: WireLogprob[] } }
  | { type: 'done'; index: number; finishReason: FinishReason; text: string; completionIds: number[]; metrics: RequestMetrics }
  | { type: 'error'; message: string };

export interface GenerationHooks {
  /** Called in the object when request `index` finishes, before its done event is sent (sessions record turns here). */
  onDone?(index: number, done: DoneEvent): void | Promise<void>;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function wireLogprob(engine: Engine, tokenId: number, logprob: number): WireLogprob {
  const bytes = engine.tokenizer.tokenBytes(tokenId);
  return { token: decoder.decode(bytes), logprob, bytes: [...bytes] };
}

function toWire(engine: Engine, index: number, event: GenerationEvent): WireEvent {
  if (event.type === 'done') {
    return { type: 'done', index, finishReason: event.finishReason, text: event.text, completionIds: event.tokenIds, metrics: event.metrics };
  }
  const wire: WireEvent = { type: 'token', index, tokenId: event.tokenId, text: event.text };
  if (event.logprob !== undefined) {
    const top = (event.topLogprobs ?? []).map((t: TopLogprob) => wireLogprob(engine, t.tokenId, t.logprob));
    wire.logprob = { ...wireLogprob(engine, event.tokenId, event.logprob), top };
  }
  return wire;
}

/** A started generation: its event stream, and `stop` to cancel it from outside (see InferenceObject.cancel). */
export interface StartedGeneration {
  stream: ReadableStream<Uint8Array>;
  stop(): void;
  /** Settles when every request has finished (or was cancelled) and the stream is closed. */
  finished: Promise<void>;
}

/**
 * Starts every request at once (they batch together in the engine) and returns their merged events.
 * Throws the engine's InvalidRequestError synchronously, with nothing left running, if any request is bad.
 */
export function runGeneration(
  engine: Engine,
  requests: GenerationRequest[],
  metrics: ServiceMetrics,
  options: Omit<GenerateOptions, 'signal'> & GenerationHooks = {},
): StartedGeneration {
  const abort = new AbortController();
  const streams: AsyncGenerator<GenerationEvent>[] = [];
  try {
    for (const request of requests) streams.push(engine.generate(request, { signal: abort.signal, session: options.session }));
  } catch (err) {
    abort.abort();
    for (const s of streams) void s.return(undefined);
    throw err;
  }

  // Writes to a TransformStream's writable reject once its readable end is cancelled, so a failed write
  // (or the writer closing early) means the reader is gone: stop generating.
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const writer = writable.getWriter();
  let open = true;
  const stop = (): void => {
    if (!open) return;
    open = false;
    abort.abort();
    writer.abort().catch(() => {});
  };
  const send = (event: WireEvent): void => {
    if (open) writer.write(encoder.encode(`${JSON.stringify(event)}\n`)).catch(stop);
  };
  writer.closed.catch(stop);

  const pump = async (stream: AsyncGenerator<GenerationEvent>, index: number): Promise<void> => {
    let last: number | undefined;
    for await (const event of stream) {
      if (event.type === 'token') {
        const now = performance.now();
        if (last !== undefined) metrics.interToken(now - last);
        last = now;
      } else {
        metrics.finished(event);
        await options.onDone?.(index, event);
      }
      send(toWire(engine, index, event));
    }
  };
  const finished = Promise.all(streams.map(pump)).then(
    () => {
      if (open) writer.close().catch(() => {});
      open = false;
    },
    (err: unknown) => {
      abort.abort();
      send({ type: 'error', message: err instanceof Error ? err.message : String(err) });
      if (open) writer.close().catch(() => {});
      open = false;
    },
  );
  return { stream: readable, stop, finished };
}

/** runGeneration's stream alone, for callers that cancel only by cancelling the stream. */
export function startGeneration(...args: Parameters<typeof runGeneration>): ReadableStream<Uint8Array> {
  return runGeneration(...args).stream;
}

/**
 * Generations in flight on one object, by id, so the worker can cancel one explicitly. A stream cancel
 * does not always cross RPC: when a client disconnects, its worker request context is torn down and the
 * object's side of the stream is simply dropped, so the worker also calls `cancel(id)` (from waitUntil).
 */
export class RunningGenerations {
  private readonly byId = new Map<string, () => void>();

  add(generation: StartedGeneration): string {
    const id = crypto.randomUUID();
    this.byId.set(id, generation.stop);
    void generation.finished.finally(() => this.byId.delete(id));
    return id;
  }

  cancel(id: string): boolean {
    const stop = this.byId.get(id);
    stop?.();
    return stop !== undefined;
  }

  get size(): number {
    return this.byId.size;
  }
}

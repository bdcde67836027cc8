import type { LoraAdapter } from '../engine/adapters/lora-adapter.js';
import type { Engine, GenerateOptions } from '../engine/engine.js';
import { InvalidRequestError } from '../engine/errors.js';
import type { GenerationRequest } from '../engine/request.js';
import type { DoneEvent, FinishReason, GenerationEvent, TopLogprob } from '../engine/sequence-output.js';
import type { RequestMetrics } from '../engine/request-metrics.js';
import type { PromptTokenLogprob } from '../engine/sampling/prompt-logprobs.js';
import type { ServiceMetrics } from './service-metrics.js';
import type { ResponseView } from '../responses/response-view.js';
import { fromGenerationError, type ServiceError } from './rpc-error.js';
import { constrainAfterReasoning } from './template-reasoning.js';

/**
 * One generation run by an object for the worker: one or more engine requests (a batch of prompts, each
 * with OpenAI's `n`) whose events are pushed, as they come, into a sink the worker passed over RPC (its
 * EventChannel). Pushing rather than returning a stream is what lets the object notice a client that went
 * away: workerd does not carry a stream's cancellation back across RPC (workerd#7298), but a push into a
 * request context that no longer exists fails at once. Then every engine request is aborted, which frees
 * their blocks at the next step. HTTP framing (SSE, OpenAI shapes) stays in the worker.
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
  | {
      type: 'done';
      index: number;
      finishReason: FinishReason;
      text: string;
      completionIds: number[];
      metrics: RequestMetrics;
      /** Beam search: the candidate's score and summed log-probability. */
      beam?: { score: number; cumulativeLogprob: number };
      /** prompt_logprobs: per prompt token (the first: null), its logprob, rank and alternatives. */
      promptLogprobs?: (WirePromptLogprob | null)[];
      /** A response of the Responses API, finished (and stored, if it is) by the object: responses.ts. */
      response?: ResponseView;
    }
  /** The generation failed or was stopped from outside; no done events follow for unfinished choices. */
  | { type: 'error'; error: ServiceError };

/** The worker's end of a generation (an RPC stub of its EventChannel). */
export interface EventSink {
  push(events: WireEvent[]): void | Promise<void>;
  close(): void | Promise<void>;
}

/** An RPC stub as received in a call: valid only during that call unless duplicated. */
type ReceivedStub<T> = T & Partial<Disposable> & { dup?(): T & Disposable };

/** What a done hook may add to the done event it precedes. */
export interface DoneExtras {
  response?: ResponseView;
}

export interface GenerationHooks {
  /** Called in the object when request `index` finishes, before its done event is sent (sessions record turns here). */
  /** It may return DoneExtras, which the done event then carries. */
  onDone?(index: number, done: DoneEvent): unknown;
}

/** Whom a generation runs for: its usage is counted under the key's name, and it queues fairly among owners. */
export interface Account {
  keyName: string;
  /** The engine's fairness group: one per owner, so one key's burst does not starve another's requests. */
  fairnessGroup: string;
  /** Salts its KV blocks' hashes, so its cached prefixes are shared only with its own (see ShardContext.cacheSalt). */
  cacheSalt?: string;
}

const decoder = new TextDecoder();

/** A prompt token's log-probability, as vLLM reports it: keyed by id, with its rank among all tokens. */
export interface WirePromptLogprob extends WireLogprob {
  tokenId: number;
  rank: number;
  top: (WireLogprob & { tokenId: number })[];
}

function wirePromptLogprob(engine: Engine, p: PromptTokenLogprob | null): WirePromptLogprob | null {
  if (!p) return null;
  const top = p.top.map((t) => ({ ...wireLogprob(engine, t.tokenId, t.logprob), tokenId: t.tokenId }));
  return { ...wireLogprob(engine, p.tokenId, p.logprob), tokenId: p.tokenId, rank: p.rank, top };
}

function wireLogprob(engine: Engine, tokenId: number, logprob: number): WireLogprob {
  const bytes = engine.tokenizer.tokenBytes(tokenId);
  return { token: decoder.decode(bytes), logprob, bytes: [...bytes] };
}

function toWire(engine: Engine, index: number, event: GenerationEvent): WireEvent {
  if (event.type === 'done') {
    const done: WireEvent = {
      type: 'done',
      index,
      finishReason: event.finishReason,
      text: event.text,
      completionIds: event.tokenIds,
      metrics: event.metrics,
    };
    if (event.beam) done.beam = event.beam;
    if (event.promptLogprobs) done.promptLogprobs = event.promptLogprobs.map((p) => wirePromptLogprob(engine, p));
    return done;
  }
  const wire: WireEvent = { type: 'token', index, tokenId: event.tokenId, text: event.text };
  if (event.logprob !== undefined) {
    const top = (event.topLogprobs ?? []).map((t: TopLogprob) => wireLogprob(engine, t.tokenId, t.logprob));
    wire.logprob = { ...wireLogprob(engine, event.tokenId, event.logprob), top };
  }
  return wire;
}

/** A generation in flight: `stop` cancels it from outside (a deleted session), telling the client why. */
export interface RunningGeneration {
  stop(reason?: ServiceError): void;
  /**
   * Settles once every request has finished or was cancelled and the sink was closed, with the tokens
   * generated (what a key's tokens-per-minute limit is charged).
   */
  finished: Promise<{ completionTokens: number }>;
}

/**
 * Pushes events to the sink one RPC call at a time; events that arrive while a call is in flight go in
 * the next call together, so a fast batch costs few round trips. A failed push means the reader is gone.
 */
class SinkWriter {
  private pending: WireEvent[] = [];
  private flushing: Promise<void> | undefined;
  gone = false;

  constructor(
    private readonly sink: EventSink,
    private readonly onGone: () => void,
  ) {}

  send(event: WireEvent): void {
    if (this.gone) return;
    this.pending.push(event);
    this.flushing ??= this.flush();
  }

  private async flush(): Promise<void> {
    while (this.pending.length > 0 && !this.gone) {
      const batch = this.pending;
      this.pending = [];
      try {
        await this.sink.push(batch);
      } catch {
        this.gone = true;
        this.onGone();
      }
    }
    this.flushing = undefined;
  }

  async close(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (!this.gone) await Promise.resolve(this.sink.close()).catch(() => {});
  }
}

/**
 * The LoRA adapter the requests name (one call's requests come from one HTTP request, so one model), loaded
 * now; undefined for the base model. Refused as Engine.loadAdapter refuses it (404 for a name it has not).
 */
export async function loadRequestsAdapter(
  engine: Engine,
  requests: readonly GenerationRequest[],
): Promise<LoraAdapter | undefined> {
  const names = new Set(requests.map((r) => r.adapter));
  if (names.size > 1) throw new InvalidRequestError('model', 'requests of one call must name one model');
  const [name] = names;
  return name === undefined ? undefined : engine.loadAdapter(name);
}

/**
 * Starts every request at once (they batch together in the engine) and pushes their events to `sink`,
 * indexed across requests (request r's completion i is r × n + i). Throws the engine's InvalidRequestError
 * synchronously, with nothing left running, if any request is bad. Call it inside the RPC method that
 * received `sink`: the stub is duplicated here so it outlives that call.
 */
export function runGeneration(
  engine: Engine,
  requests: GenerationRequest[],
  metrics: ServiceMetrics,
  received: ReceivedStub<EventSink>,
  options: Omit<GenerateOptions, 'signal' | 'fairnessGroup'> & GenerationHooks & { account?: Account } = {},
): RunningGeneration {
  requests = requests.map((request) => constrainAfterReasoning(engine, request));
  // Every request is checked before any is queued, so a bad one in a batch leaves nothing behind.
  for (const request of requests) engine.resolve(request);
  const abort = new AbortController();
  const streams: AsyncGenerator<GenerationEvent>[] = [];
  try {
    for (const request of requests)
      streams.push(
        engine.generate(request, {
          signal: abort.signal,
          session: options.session,
          fairnessGroup: options.account?.fairnessGroup,
          cacheSalt: options.account?.cacheSalt,
          adapter: options.adapter,
        }),
      );
  } catch (err) {
    abort.abort();
    for (const s of streams) void s.return(undefined);
    throw err;
  }
  const sink = received.dup?.() ?? received;
  // The received stub is let go of now, not when the call returns: workerd warns ("An RPC stub was not
  // disposed properly") if garbage collection finds it first, which it can in the turns before the
  // call's own disposal runs.
  if (sink !== received) received[Symbol.dispose]?.();
  const writer = new SinkWriter(sink, () => abort.abort());
  let completionTokens = 0;

  const pump = async (stream: AsyncGenerator<GenerationEvent>, first: number): Promise<void> => {
    const last = new Map<number, number>();
    for await (const event of stream) {
      const index = first + event.index;
      if (event.type === 'token') {
        const now = performance.now();
        const previous = last.get(index);
        if (previous !== undefined) metrics.interToken(now - previous);
        last.set(index, now);
      } else {
        metrics.finished(event, event.index === 0, options.account?.keyName);
        completionTokens += event.metrics.completionTokens;
        const extras = (await options.onDone?.(index, event)) as DoneExtras | undefined;
        writer.send({ ...toWire(engine, index, event), ...extras } as WireEvent);
        continue;
      }
      writer.send(toWire(engine, index, event));
    }
  };
  let first = 0;
  const pumps = requests.map((request, r) => {
    const run = pump(streams[r], first);
    first += request.n ?? 1;
    return run;
  });
  const finished = Promise.all(pumps)
    .catch((err: unknown) => {
      abort.abort();
      console.error('generation failed', err);
      writer.send({ type: 'error', error: fromGenerationError(err) });
    })
    .then(() => writer.close())
    .finally(() => (sink as Partial<Disposable>)[Symbol.dispose]?.())
    .then(() => ({ completionTokens }));
  // Its full KV blocks go to storage once its last event is out, so writing never delays a token.
  void finished.then(() => engine.storeKv()).catch((err: unknown) => console.error('storing KV blocks failed', err));
  const stop = (reason?: ServiceError): void => {
    if (reason !== undefined) writer.send({ type: 'error', error: reason });
    abort.abort();
  };
  return { stop, finished };
}

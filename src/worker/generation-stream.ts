import type { GenerationRequest } from '../engine/request.js';
import type { Env } from '../env.js';
import type { WireEvent } from '../objects/generation-run.js';
import type { Started } from '../objects/inference-object.js';
import type { RpcResult } from '../objects/rpc-error.js';
import type { RateLimitState } from '../objects/tenancy/rate-limiter.js';
import type { Tenant } from '../objects/tenancy/tenant.js';
import type { ReasoningFormat } from '../responses/reasoning.js';
import { ApiError, unwrap } from './errors.js';
import { EventChannel } from './event-channel.js';
import { shardLimits } from './limits.js';
import { shardStub } from './routing.js';

export type DoneWire = Extract<WireEvent, { type: 'done' }>;
export type TokenWire = Extract<WireEvent, { type: 'token' }>;

/** A running generation as the worker sees it: its events, and a way to stop it. */
export interface Generation {
  events: AsyncIterable<WireEvent>;
  /** Cancels the engine requests (idempotent; a no-op once the generation finished). */
  cancel(): void;
  /** The key's rate limits after this request, for the response's x-ratelimit-* headers. */
  rateLimit?: RateLimitState;
  /** How the model marks reasoning in its answer, where it does. */
  reasoning?: ReasoningFormat;
}

/**
 * Opens a channel for one generation; `start` is the RPC call that hands it to the object. Client errors
 * from the object surface as ApiError. When `signal` (the incoming request's, aborted when its client
 * disconnects) fires, or the events are left early, the channel is abandoned and the object cancels.
 */
export async function openGeneration(
  start: (channel: EventChannel) => Promise<RpcResult<Started>>,
  signal?: AbortSignal,
): Promise<Generation> {
  const channel = new EventChannel();
  const { rateLimit, reasoning } = unwrap(await start(channel));
  const cancel = (): void => channel.abandon();
  if (signal?.aborted) cancel();
  signal?.addEventListener('abort', cancel, { once: true });
  return { events: channel.events(), cancel, rateLimit, reasoning };
}

/** Starts `requests` on `shard` for `tenant` (see openGeneration); their completions are indexed request-major. */
export function startGeneration(
  env: Env,
  shard: number,
  tenant: Tenant,
  requests: GenerationRequest[],
  signal?: AbortSignal,
): Promise<Generation> {
  const stub = shardStub(env, shard);
  const caller = { tenant, limits: shardLimits(env, shard) };
  return openGeneration((channel) => stub.generate(requests, channel, caller), signal);
}

/** Per-choice results of a finished generation, for non-streamed responses. */
export interface Collected {
  tokens: TokenWire[][];
  done: DoneWire[];
}

export async function collect(generation: Generation, count: number): Promise<Collected> {
  const result: Collected = { tokens: Array.from({ length: count }, () => []), done: [] };
  for await (const event of generation.events) {
    if (event.type === 'error') throw ApiError.from(event.error);
    if (event.type === 'token') result.tokens[event.index].push(event);
    else result.done[event.index] = event;
  }
  if (result.done.filter(Boolean).length !== count) throw new Error('generation ended before every choice finished');
  return result;
}

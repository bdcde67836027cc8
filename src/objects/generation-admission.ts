import type { ReasoningFormat } from '../responses/reasoning.js';
import { fail, ok, type RpcResult, type ServiceError } from './rpc-error.js';
import { queueRefusal } from './tenancy/queue-share.js';
import { shardQuota, type ShardLimits } from './tenancy/rate-limit-config.js';
import type { Admission, RateLimiter, RateLimitState, Ticket } from './tenancy/rate-limiter.js';
import type { Caller } from './tenancy/tenant.js';

/** A generation handed to the engine; `rateLimit` is its key's limits after it (absent when it has none). */
export interface Started {
  started: true;
  rateLimit?: RateLimitState;
  /** How the model marks reasoning in this prompt's answer (chat prompts of models that reason), for the worker to split it off. */
  reasoning?: ReasoningFormat;
}

/** What a generation's start says back once the engine took it: how its answer marks reasoning, if it does. */
export interface Launched {
  reasoning?: ReasoningFormat;
}

/** What admission reads of the engine: the sequences waiting in its queue, by owner. */
export type QueueView = Parameters<typeof queueRefusal>[0];

/** Starts an admitted generation on `engine`; it calls `onSettled` with its generated tokens once it ends. */
export type Launch<E> = (engine: E, onSettled: (completionTokens: number) => void) => Promise<RpcResult<Launched>>;

const LIMIT_WORDS = {
  requests: 'requests per minute',
  tokens: 'generated tokens per minute',
  concurrent: 'concurrent requests',
} as const;

/** A 429 naming the key (by name), the limit and this shard's share of it. */
function rateLimited(name: string, refusal: Extract<Admission, { ok: false }>): ServiceError {
  const retry = Math.ceil((refusal.state.retryAfterMs ?? 1000) / 1000);
  return {
    status: 429,
    type: refusal.refused === 'tokens' ? 'tokens' : 'requests',
    message: `rate limit reached for key '${name}': ${LIMIT_WORDS[refusal.refused]} (this shard's share of the limit: ${refusal.limit}); retry in ${retry} s`,
    param: null,
    code: refusal.refused === 'concurrent' ? 'concurrency_limit_exceeded' : 'rate_limit_exceeded',
    rateLimit: refusal.state,
  };
}

const started = (rateLimit: RateLimitState, reasoning?: ReasoningFormat): Started => {
  const head: Started = rateLimit.requests || rateLimit.tokens ? { started: true, rateLimit } : { started: true };
  return reasoning ? { ...head, reasoning } : head;
};

/**
 * The shard's one way in for work: the queue's room (its fair share per owner, tenancy/queue-share.ts), then
 * the key's share of its rate limits, then the work, then the limiter settled with what it generated.
 */
export class GenerationAdmission {
  constructor(
    private readonly limiter: RateLimiter,
    private readonly maxQueue: () => number,
  ) {}

  /**
   * Admits a request of key `name` against this shard's share of its limits (the worker reads RATE_LIMITS
   * and sends them): a ticket to settle when it ends, or a 429.
   */
  admit(name: string, limits: ShardLimits): RpcResult<{ ticket: Ticket; state: RateLimitState }> {
    const admission = this.limiter.admit(name, shardQuota(limits, name));
    if (!admission.ok) return fail(rateLimited(name, admission));
    return ok({ ticket: admission.ticket, state: admission.state });
  }

  /**
   * A request slot for work that generates nothing (a session's or a hook's write): admitted and settled at
   * once. Without `limits` (a caller that sends none) nothing is counted.
   */
  charge(name: string, limits: ShardLimits | undefined): RpcResult<void> {
    if (!limits) return ok(undefined);
    const admitted = this.admit(name, limits);
    if (!admitted.ok) return admitted;
    admitted.value.ticket.settle(0);
    return ok(undefined);
  }

  /**
   * Admits a generation of `sequences` places for `caller` on `engine` (or the engine's 503) and launches it:
   * a refusal (the queue's or the limiter's 429) launches nothing; a launch the engine refused still used its
   * slot (tokenising and checking it cost the shard its time), so its ticket is settled with no tokens.
   */
  async generation<E extends QueueView>(
    engine: RpcResult<E>,
    caller: Caller,
    sequences: number,
    launch: Launch<E>,
  ): Promise<RpcResult<Started>> {
    if (!engine.ok) return engine;
    const full = queueRefusal(engine.value, this.maxQueue(), caller.tenant.owner, sequences);
    if (full) return fail(full);
    const admitted = this.admit(caller.tenant.name, caller.limits);
    if (!admitted.ok) return admitted;
    const { ticket, state } = admitted.value;
    const launched = await launch(engine.value, (completionTokens) => ticket.settle(completionTokens));
    if (!launched.ok) {
      ticket.settle(0);
      return launched;
    }
    return ok(started(state, launched.value.reasoning));
  }
}

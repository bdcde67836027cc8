import type { ServiceError } from '../rpc-error.js';

/**
 * MAX_QUEUE, shared fairly between keys and counted in sequences (a request of 64 prompts is 64 places,
 * n = 4 is 4), since sequences are what wait for a batch slot. One key alone may fill the queue; once
 * another key waits, each key is entitled to an equal share (MAX_QUEUE / keys waiting, the asking one
 * included), and:
 * - a key within its share is admitted even when the queue is full of others' work, so one key's burst
 *   cannot lock another out (the others' excess drains, and they are refused until it has);
 * - a key past its share is refused while any other key waits, however empty the queue.
 * So the queue holds at most MAX_QUEUE sequences of the first key to fill it, plus each other key's
 * share: never more than 2 × MAX_QUEUE, and no key more than its share while others wait.
 */
export interface QueueState {
  /** Sequences waiting for a batch slot, by owner (the engine's fairness group). */
  waiting: ReadonlyMap<string | undefined, number>;
  maxQueue: number;
}

export type QueueVerdict =
  | { ok: true }
  | { ok: false; code: 'overloaded' | 'queue_share_exceeded'; share: number; waiting: number; asked: number };

export function admitToQueue(state: QueueState, owner: string, sequences: number): QueueVerdict {
  let total = 0;
  let others = 0;
  for (const [group, count] of state.waiting) {
    if (count <= 0) continue;
    total += count;
    if (group !== owner) others++;
  }
  const mine = state.waiting.get(owner) ?? 0;
  const share = Math.max(1, Math.floor(state.maxQueue / (others + 1)));
  const withinShare = mine + sequences <= share;
  if (others > 0 && !withinShare)
    return { ok: false, code: 'queue_share_exceeded', share, waiting: mine, asked: sequences };
  // An empty queue takes any request, as before: a request larger than the queue is not refused for ever.
  if (total > 0 && total + sequences > state.maxQueue && !withinShare)
    return { ok: false, code: 'overloaded', share, waiting: mine, asked: sequences };
  return { ok: true };
}

/** The 429 for a request of `owner` that the queue refuses (see admitToQueue), or undefined when it may wait. */
export function queueRefusal(
  engine: { waitingByGroup(): ReadonlyMap<string | undefined, number> },
  maxQueue: number,
  owner: string,
  sequences: number,
): ServiceError | undefined {
  const verdict = admitToQueue({ waiting: engine.waitingByGroup(), maxQueue }, owner, sequences);
  if (verdict.ok) return undefined;
  const message =
    verdict.code === 'overloaded'
      ? 'the model is overloaded; retry shortly'
      : `this request's ${verdict.asked} sequences would give this key ${verdict.waiting + verdict.asked} waiting on this shard (${verdict.waiting} already), past its fair share of the queue (${verdict.share} of MAX_QUEUE ${maxQueue}) while other keys wait; retry shortly`;
  return {
    status: 429,
    type: 'rate_limit_error',
    message,
    param: null,
    code: verdict.code,
    rateLimit: { retryAfterMs: 1000 },
  };
}

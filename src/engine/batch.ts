import { SequenceFailedError } from './errors.js';
import type { BlockPersistence } from './kv/block-persistence.js';
import type { KvCacheManager } from './kv/paged-kv.js';
import type { SessionCaches } from './kv/session-caches.js';
import type { ModeHost, Sequence, RequestGroup } from './sequence.js';
import type { Scheduler } from './scheduler.js';
import type { TokenEvent } from './sequence-output.js';

/** The counters the batch and the modes advance (the rest of EngineStats' are the step's). */
export interface BatchCounters {
  generatedTokens: number;
  proposedTokens: number;
  acceptedTokens: number;
}

/**
 * The engine's sequences and their lives: how one joins, streams a token, forks, and leaves (retired with its
 * done event, dropped, or failed with its whole request and nothing else). What the modes see of the engine.
 */
export class Batch implements ModeHost {
  readonly active = new Set<Sequence>();
  private nextId = 1;

  constructor(
    private readonly kv: KvCacheManager,
    private readonly scheduler: Scheduler<Sequence>,
    private readonly sessions: SessionCaches,
    private readonly persistence: BlockPersistence | undefined,
    readonly counters: BatchCounters,
  ) {}

  newId(): number {
    return this.nextId++;
  }

  emit(seq: Sequence, event: TokenEvent): void {
    this.counters.generatedTokens++;
    seq.tokens.push(event.tokenId);
    seq.group.events.push(event);
  }

  commit(seq: Sequence): void {
    this.kv.commit(seq.kv, seq.tokens);
  }

  truncate(seq: Sequence, length: number): void {
    this.kv.truncate(seq.kv, length);
  }

  branch(parent: Sequence): Sequence {
    const child: Sequence = { ...parent, id: this.newId(), kv: this.kv.fork(parent.kv), tokens: [...parent.tokens] };
    this.active.add(child);
    if (this.scheduler.running.includes(parent)) this.scheduler.adopt(child);
    else this.scheduler.addBehind(child, parent);
    return child;
  }

  fork(parent: Sequence, child: Sequence): void {
    child.kv = this.kv.fork(parent.kv);
    child.tokens = [...parent.tokens];
    child.admitted = true;
    child.output.cachedTokens = parent.output.cachedTokens;
    child.output.promptLogprobs = parent.output.promptLogprobs;
    this.scheduler.adopt(child);
  }

  drop(seq: Sequence): void {
    this.scheduler.remove(seq);
    seq.group.mode.release(seq);
    this.active.delete(seq);
  }

  retire(seq: Sequence): void {
    const chain = [...seq.kv.hashes];
    // A cancel that arrived during the last pass (a session being deleted) keeps nothing either.
    const kept = seq.session !== undefined && seq.output.finishReason !== 'cancelled' && !seq.group.cancelRequested;
    if (kept) {
      this.scheduler.detach(seq);
      this.sessions.keep(seq.session!, seq.kv, seq.tokens);
    } else {
      this.scheduler.remove(seq);
    }
    // A session turn that did not finish leaves the session as it was, in storage too (it may be being deleted).
    // A finished turn's partial last block is stored too: its next turn, restored, then prefills nothing of it.
    if (seq.session === undefined || kept)
      this.persistence?.enqueue(
        chain,
        seq.session,
        kept,
        kept ? this.kv.tailOf(seq.kv, seq.tokens, seq.session!) : undefined,
      );
    seq.group.mode.release(seq);
    this.active.delete(seq);
    seq.group.events.push(seq.output.done());
    seq.group.mode.retired(seq);
  }

  /**
   * Ends one request with an error, and only it: every sequence of its group (its n siblings, its beams)
   * leaves the batch and frees its blocks, keeping nothing for a session; the error is the last event of
   * its stream. Everything else in the batch goes on.
   */
  fail(group: RequestGroup, err: unknown): void {
    const error =
      err instanceof SequenceFailedError
        ? err
        : new SequenceFailedError(
            `the generation failed: ${err instanceof Error ? err.message : String(err)}`,
            'generation_failed',
            { cause: err },
          );
    group.mode.abandon();
    for (const seq of [...this.active]) {
      if (seq.group !== group) continue;
      seq.output.cancel();
      this.drop(seq);
    }
    group.cancelRequested = true;
    group.events.push(error);
  }

  /** A step threw (a bug or a broken runtime): every request in the batch learns of it. */
  failAll(error: Error): void {
    for (const seq of this.active) {
      this.scheduler.remove(seq);
      seq.group.mode.release(seq);
      seq.group.events.push(error);
    }
    this.active.clear();
  }

  /** Ends the requests that asked to be cancelled, except sequences whose pass is in flight. */
  retireCancelled(inFlight: ReadonlySet<Sequence>): void {
    for (const seq of this.active) if (seq.group.cancelRequested && !inFlight.has(seq)) seq.group.mode.cancel(seq);
  }

  get hasCancelled(): boolean {
    return [...this.active].some((seq) => seq.group.cancelRequested);
  }
}

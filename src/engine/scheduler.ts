import type { KvCacheManager, PagedSequenceKv } from './kv/paged-kv.js';

/** What the scheduler needs to know of a request: its tokens so far and its place in the cache. */
export interface SchedulableSequence {
  readonly id: number;
  /** Prompt and generated tokens so far; the pass computes those from kv.length on. */
  readonly tokens: readonly number[];
  kv: PagedSequenceKv;
  /**
   * Positions a decoding sequence would like beyond its tokens this step (speculative proposals for the
   * pass to verify). Reserved only when the pool has them to spare: never worth a preemption.
   */
  readonly lookahead?: number;
}

export interface SchedulerLimits {
  /** Tokens one pass may compute, over all sequences (prefill chunks + decodes). */
  maxTokensPerStep: number;
  /** Sequences one pass may hold. */
  maxBatchSize: number;
}

/** The plain record of what runs in one pass, as vLLM's scheduler output: the runner executes it. */
export interface ScheduledStep<S extends SchedulableSequence> {
  rows: {
    seq: S;
    tokens: number[];
    /** True when the pass reaches the sequence's last known token, so a new one is sampled. */
    samples: boolean;
    /** Extra positions reserved after `tokens` (and counted in the budget) for proposals to be verified. */
    lookahead: number;
  }[];
  /** Sequences that gave their blocks back this step and wait to be computed again. */
  preempted: S[];
  /** Sequences admitted from the queue this step, with their prefix-cache hits. */
  admitted: { seq: S; cachedTokens: number }[];
}

/**
 * First come, first served continuous batching over a paged KV cache.
 *
 * Each step it first continues running sequences (oldest first: one decode token, or the next chunk of
 * a long prefill), then admits waiting ones while the token budget and batch size allow. When the pool
 * cannot supply a block, the newest running sequence is preempted (its blocks freed, its progress
 * forgotten) and goes back to the head of the queue to be prefilled again later (recompute).
 */
export class Scheduler<S extends SchedulableSequence> {
  readonly waiting: S[] = [];
  readonly running: S[] = [];
  preemptions = 0;

  constructor(
    private readonly kv: KvCacheManager,
    private readonly limits: SchedulerLimits,
    /** Frees memory held outside the scheduler (e.g. idle sessions' caches); true if it freed any. */
    private readonly reclaim: () => boolean = () => false,
    /**
     * A cache of its own for a sequence being admitted (a session's, kept from its last turn), taken only
     * at admission so that waiting sequences hold no blocks; without one, the prefix cache is searched.
     */
    private readonly ownCache: (seq: S) => PagedSequenceKv | undefined = () => undefined,
  ) {}

  add(seq: S): void {
    this.waiting.push(seq);
  }

  /** A sequence that arrives already running, with its blocks (a fork of a running sequence). */
  adopt(seq: S): void {
    this.running.push(seq);
  }

  /** Takes a sequence out wherever it is and frees its blocks (finished or cancelled). */
  remove(seq: S): void {
    this.detach(seq);
    this.kv.free(seq.kv);
  }

  /** Takes a sequence out, leaving its blocks to whoever holds it now (a session keeping its cache). */
  detach(seq: S): void {
    const r = this.running.indexOf(seq);
    if (r >= 0) this.running.splice(r, 1);
    const w = this.waiting.indexOf(seq);
    if (w >= 0) this.waiting.splice(w, 1);
  }

  get hasWork(): boolean {
    return this.running.length > 0 || this.waiting.length > 0;
  }

  schedule(): ScheduledStep<S> {
    const step: ScheduledStep<S> = { rows: [], preempted: [], admitted: [] };
    let budget = this.limits.maxTokensPerStep;

    for (let i = 0; i < this.running.length && budget > 0; i++) {
      const seq = this.running[i];
      const count = Math.min(seq.tokens.length - seq.kv.length, budget);
      if (count <= 0) continue;
      while (!this.kv.reserve(seq.kv, count)) {
        if (this.reclaim()) continue;
        const victim = this.running[this.running.length - 1];
        this.preempt(victim, step);
        if (victim === seq) break;
      }
      if (this.running[i] !== seq) break; // seq itself was preempted: nothing newer is left running
      step.rows.push(this.row(seq, count));
      budget -= count;
    }

    while (this.waiting.length > 0 && budget > 0 && this.running.length < this.limits.maxBatchSize && step.preempted.length === 0) {
      const seq = this.waiting[0];
      if (seq.kv.length === 0) {
        const own = this.ownCache(seq);
        if (own) seq.kv = own;
        else this.kv.matchPrefix(seq.kv, seq.tokens);
      }
      const cachedTokens = seq.kv.length;
      const count = Math.min(seq.tokens.length - seq.kv.length, budget);
      let reserved = this.kv.reserve(seq.kv, count);
      while (!reserved && this.reclaim()) reserved = this.kv.reserve(seq.kv, count);
      if (!reserved) {
        // It waits at the head of the queue holding nothing, so waiting requests can never deadlock
        // the pool; its full blocks stay in the prefix cache for when it is admitted.
        this.kv.free(seq.kv);
        break;
      }
      this.waiting.shift();
      this.running.push(seq);
      step.admitted.push({ seq, cachedTokens });
      step.rows.push(this.row(seq, count));
      budget -= count;
    }

    // Speculation last, from what is left: it must never cost another sequence its place or its blocks.
    for (const row of step.rows) {
      if (budget <= 0) break;
      row.lookahead = this.reserveLookahead(row, budget);
      budget -= row.lookahead;
    }
    return step;
  }

  private row(seq: S, count: number): ScheduledStep<S>['rows'][number] {
    const start = seq.kv.length;
    return { seq, tokens: seq.tokens.slice(start, start + count), samples: start + count === seq.tokens.length, lookahead: 0 };
  }

  /** Room for a sampling row's proposals, when the budget and the pool's spare blocks allow; else 0. */
  private reserveLookahead({ seq, tokens, samples }: ScheduledStep<S>['rows'][number], budget: number): number {
    const wanted = Math.min(seq.lookahead ?? 0, budget);
    if (!samples || wanted <= 0) return 0;
    return this.kv.reserve(seq.kv, tokens.length + wanted) ? wanted : 0;
  }

  private preempt(seq: S, step: ScheduledStep<S>): void {
    this.running.splice(this.running.indexOf(seq), 1);
    const row = step.rows.findIndex((r) => r.seq === seq);
    if (row >= 0) step.rows.splice(row, 1);
    this.kv.free(seq.kv);
    this.waiting.unshift(seq);
    step.preempted.push(seq);
    this.preemptions++;
  }
}

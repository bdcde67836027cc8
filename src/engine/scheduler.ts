import type { KvTransfer } from './kv/kv-memory.js';
import type { KvCacheManager, PagedSequenceKv } from './kv/paged-kv.js';

/** What the scheduler needs to know of a request: its tokens so far and its place in the cache. */
export interface SchedulableSequence {
  readonly id: number;
  /** Prompt and generated tokens so far; the pass computes those from kv.length on. */
  readonly tokens: readonly number[];
  kv: PagedSequenceKv;
  /**
   * Whose request this is, for fair admission: waiting sequences are admitted round-robin across groups
   * (first come, first served within one). The host names the groups; sequences without one share a group.
   */
  readonly fairnessGroup?: string;
  /** The session this is a turn of: its previous turn's partial last block may be restored for it. */
  readonly session?: string;
}

/**
 * What the way a sequence generates asks of the scheduler (engine/modes): the scheduler asks, the sequence
 * carries no field per feature.
 */
export interface SchedulingHints<S> {
  /**
   * Positions a decoding sequence would like beyond its tokens this step (speculative proposals for the
   * pass to verify). Reserved only when the pool has them to spare: never worth a preemption.
   */
  lookahead(seq: S): number;
  /**
   * Sequences that only advance together (the beams of one search): one that has computed its token
   * waits, holding its blocks, until the others have too. Preempted together when that would deadlock.
   */
  cohort(seq: S): object | undefined;
  /** Computes its whole prompt, never taking blocks from the prefix cache (it wants the prompt's logits). */
  skipsPrefixCache(seq: S): boolean;
}

const NO_HINTS: SchedulingHints<unknown> = {
  lookahead: () => 0,
  cohort: () => undefined,
  skipsPrefixCache: () => false,
};

export interface SchedulerLimits {
  /** Tokens one pass may compute, over all sequences (prefill chunks + decodes). */
  maxTokensPerStep: number;
  /** Sequences running at once, over every lane. */
  maxBatchSize: number;
  /**
   * Passes that may be in flight at once (a runner over pipeline stages: vLLM's virtual engines). Each running
   * sequence belongs to one lane, and a lane's step schedules only its own: a sequence is never in two passes,
   * and a lane never preempts a sequence whose pass is in flight. Default 1: one pass at a time.
   */
  lanes?: number;
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
  /**
   * Block bytes to move before the pass (copy-on-write copies, restored blocks), in order: planned by the
   * cache manager as it made room, executed by the runner's KvMemory.
   */
  transfers: KvTransfer[];
}

/**
 * Continuous batching over a paged KV cache, fair across groups of requests.
 *
 * Each step it first continues running sequences (oldest first: one decode token, or the next chunk of
 * a long prefill), then admits waiting ones while the token budget and batch size allow: round-robin over
 * the fairness groups that have requests waiting (the group admitted least recently goes next), first
 * come, first served within a group, so one group's burst cannot starve another's requests. When the
 * pool cannot supply a block, the newest running sequence is preempted (its blocks freed, its progress
 * forgotten) and goes back to the head of the queue to be prefilled again later (recompute), ahead of
 * every group's turn.
 */
export class Scheduler<S extends SchedulableSequence> {
  readonly waiting: S[] = [];
  readonly running: S[] = [];
  preemptions = 0;
  /** Admissions so far; a group's last one is its place in the round-robin. */
  private admissions = 0;
  private readonly lastAdmitted = new Map<string | undefined, number>();
  /** Sequences that keep the head of the queue whatever the round-robin says (preempted, or unsticking). */
  private readonly headFirst = new WeakSet<S>();
  readonly lanes: number;
  /** Each running sequence's lane; a cohort's members share their first member's. */
  private readonly laneOf = new WeakMap<S | object, number>();

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
    private readonly hints: SchedulingHints<S> = NO_HINTS,
  ) {
    this.lanes = Math.max(1, limits.lanes ?? 1);
  }

  add(seq: S): void {
    this.waiting.push(seq);
  }

  /** Queues `seq` right behind `sibling` (a fork of a waiting sequence goes where its parent is). */
  addBehind(seq: S, sibling: S): void {
    const at = this.waiting.indexOf(sibling);
    if (at < 0) this.waiting.push(seq);
    else this.waiting.splice(at + 1, 0, seq);
  }

  /**
   * A sequence that arrives already running, with its blocks (a fork of a running sequence): in its cohort's
   * lane, or the lane running the fewest (it is in no pass yet).
   */
  adopt(seq: S): void {
    this.running.push(seq);
    this.assignLane(seq);
  }

  /** The lane `seq` runs in (0 with one lane, and for a sequence not running). */
  lane(seq: S): number {
    return this.laneOf.get(seq) ?? 0;
  }

  private assignLane(seq: S, lane?: number): void {
    if (this.lanes === 1) return;
    const cohort = this.hints.cohort(seq);
    const cohortLane = cohort === undefined ? undefined : this.laneOf.get(cohort);
    const chosen = cohortLane ?? lane ?? this.leastLoadedLane();
    this.laneOf.set(seq, chosen);
    if (cohort !== undefined && cohortLane === undefined) this.laneOf.set(cohort, chosen);
  }

  /** Whether `lane` may admit `seq`: not a cohort member whose siblings run in another lane. */
  private admissibleIn(seq: S, lane: number | undefined): boolean {
    const cohort = this.hints.cohort(seq);
    if (lane === undefined || cohort === undefined) return true;
    const running = this.running.find((s) => this.hints.cohort(s) === cohort);
    if (running !== undefined) return this.lane(running) === lane;
    this.laneOf.delete(cohort);
    return true;
  }

  private leastLoadedLane(): number {
    const counts = new Array<number>(this.lanes).fill(0);
    for (const seq of this.running) counts[this.lane(seq)]++;
    return counts.indexOf(Math.min(...counts));
  }

  /** Running sequences a lane may hold: an even share of the batch, so the passes in flight are alike. */
  private get laneBatch(): number {
    return Math.ceil(this.limits.maxBatchSize / this.lanes);
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
    this.laneOf.delete(seq);
    const w = this.waiting.indexOf(seq);
    if (w >= 0) this.waiting.splice(w, 1);
  }

  /**
   * Running sequences back to the head of the queue, to be recomputed from their tokens (the runner lost the
   * KV): every one, or those of `sequences` still running. A cohort goes whole or not at all: `busy` (in a pass
   * in flight) keeps a sequence, and every member of its cohort, running until that pass settles.
   */
  preemptAll(busy: (seq: S) => boolean = () => false, sequences: readonly S[] = this.running): void {
    const step: ScheduledStep<S> = { rows: [], preempted: [], admitted: [], transfers: [] };
    const unit = (seq: S): object => this.hints.cohort(seq) ?? seq;
    const held = new Set(this.running.filter(busy).map(unit));
    for (const seq of [...sequences].reverse())
      if (this.running.includes(seq) && !held.has(unit(seq))) this.preempt(seq, step);
  }

  get hasWork(): boolean {
    return this.running.length > 0 || this.waiting.length > 0;
  }

  /**
   * What runs in the next pass: with lanes, `lane`'s sequences only (and those it admits); without `lane`, every
   * running sequence (a host stepping by hand, nothing in flight).
   */
  schedule(lane?: number): ScheduledStep<S> {
    let step = this.plan(lane);
    if (step.rows.length === 0 && this.unstick(step, lane)) {
      const retry = this.plan(lane);
      retry.preempted.unshift(...step.preempted);
      step = retry;
    }
    step.transfers = this.kv.takeTransfers();
    return step;
  }

  /** Whether `seq` may run in (or be preempted by) `lane`'s step. */
  private inLane(seq: S, lane: number | undefined): boolean {
    return lane === undefined || this.lane(seq) === lane;
  }

  /** The newest running sequence `lane` may preempt. */
  private newestIn(lane: number | undefined): S | undefined {
    for (let i = this.running.length - 1; i >= 0; i--) if (this.inLane(this.running[i], lane)) return this.running[i];
    return undefined;
  }

  /**
   * Nothing can run: every running sequence waits for a cohort sibling (a beam for a preempted beam of
   * its search) and the head of the queue cannot get blocks, so two searches could each hold what the
   * other needs for ever. The newest cohort other than the head's gives all its blocks back and queues
   * right behind the head. Returns whether anything was preempted.
   */
  private unstick(step: ScheduledStep<S>, lane: number | undefined): boolean {
    const head = this.waiting[0];
    if (head === undefined) return false;
    const victim = [...this.running].reverse().find((seq) => {
      const cohort = this.hints.cohort(seq);
      return this.inLane(seq, lane) && (cohort === undefined || cohort !== this.hints.cohort(head));
    });
    if (victim === undefined) return false;
    this.preempt(victim, step);
    // preempt() queued the cohort at the head; the head it displaced goes first.
    const displaced = this.waiting.indexOf(head);
    this.waiting.splice(displaced, 1);
    this.waiting.unshift(head);
    this.headFirst.add(head);
    return true;
  }

  private plan(lane: number | undefined): ScheduledStep<S> {
    const step: ScheduledStep<S> = { rows: [], preempted: [], admitted: [], transfers: [] };
    let budget = this.limits.maxTokensPerStep;
    const laneBatch = lane === undefined ? this.limits.maxBatchSize : this.laneBatch;
    let inLane = lane === undefined ? this.running.length : this.running.filter((s) => this.lane(s) === lane).length;

    // Forks (n > 1, beams) join the running set without admission, so the batch limit is kept here too.
    for (let i = 0; i < this.running.length && budget > 0 && step.rows.length < this.limits.maxBatchSize; i++) {
      const seq = this.running[i];
      if (!this.inLane(seq, lane)) continue;
      const count = Math.min(seq.tokens.length - seq.kv.length, budget);
      if (count <= 0) continue;
      let reserved = this.kv.reserve(seq.kv, count);
      while (!reserved && this.running.includes(seq)) {
        // Its own lane's newest: another lane's may be in a pass (seq itself is the last resort).
        if (!this.reclaim()) this.preempt(this.newestIn(lane) ?? seq, step);
        reserved = this.running.includes(seq) && this.kv.reserve(seq.kv, count);
      }
      if (!reserved) break; // seq itself was preempted: what is newer waits for the next step
      i = this.running.indexOf(seq); // a preempted cohort may have held places before it
      step.rows.push(this.row(seq, count));
      budget -= count;
    }

    inLane -= step.preempted.length;
    while (
      this.waiting.length > 0 &&
      budget > 0 &&
      this.running.length < this.limits.maxBatchSize &&
      inLane < laneBatch &&
      step.preempted.length === 0
    ) {
      this.takeTurn();
      const seq = this.waiting[0];
      // A beam whose search runs in another lane waits for that lane: a cohort advances in one pass.
      if (!this.admissibleIn(seq, lane)) break;
      if (seq.kv.length === 0) {
        const own = this.ownCache(seq);
        if (own) seq.kv = own;
        else if (!this.hints.skipsPrefixCache(seq)) this.kv.matchPrefix(seq.kv, seq.tokens, seq.session);
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
      this.headFirst.delete(seq);
      this.lastAdmitted.set(seq.fairnessGroup, ++this.admissions);
      this.forgetIdleGroups();
      this.running.push(seq);
      this.assignLane(seq, lane);
      inLane++;
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

  /**
   * Moves the next sequence to admit to the head of the queue: the oldest of the group admitted least
   * recently (a group never admitted first, then by arrival), unless the head must keep its place.
   */
  private takeTurn(): void {
    const head = this.waiting[0];
    if (head === undefined || this.headFirst.has(head)) return;
    let best = 0;
    let bestTurn = this.turnOf(head);
    const seen = new Set<string | undefined>([head.fairnessGroup]);
    for (let i = 1; i < this.waiting.length && bestTurn > 0; i++) {
      const group = this.waiting[i].fairnessGroup;
      if (seen.has(group)) continue; // only a group's oldest waiting sequence competes
      seen.add(group);
      const turn = this.turnOf(this.waiting[i]);
      if (turn < bestTurn) [best, bestTurn] = [i, turn];
    }
    if (best > 0) this.waiting.unshift(...this.waiting.splice(best, 1));
  }

  /** Forgets groups with nothing waiting, once there are many: a returning group goes first either way. */
  private forgetIdleGroups(): void {
    if (this.lastAdmitted.size <= 1024) return;
    const waiting = new Set(this.waiting.map((seq) => seq.fairnessGroup));
    for (const group of this.lastAdmitted.keys()) if (!waiting.has(group)) this.lastAdmitted.delete(group);
  }

  private turnOf(seq: S): number {
    return this.lastAdmitted.get(seq.fairnessGroup) ?? 0;
  }

  private row(seq: S, count: number): ScheduledStep<S>['rows'][number] {
    const start = seq.kv.length;
    return {
      seq,
      tokens: seq.tokens.slice(start, start + count),
      samples: start + count === seq.tokens.length,
      lookahead: 0,
    };
  }

  /** Room for a sampling row's proposals, from the budget and the pool's unused blocks (no prefix evicted); else 0. */
  private reserveLookahead({ seq, tokens, samples }: ScheduledStep<S>['rows'][number], budget: number): number {
    const wanted = Math.min(this.hints.lookahead(seq), budget);
    if (!samples || wanted <= 0) return 0;
    return this.kv.reserve(seq.kv, tokens.length + wanted, true) ? wanted : 0;
  }

  /**
   * Gives `seq`'s blocks back and queues it at the head, to be recomputed later; with it every running
   * member of its cohort, which could not advance without it and would only hold blocks meanwhile.
   */
  private preempt(seq: S, step: ScheduledStep<S>): void {
    const cohort = this.hints.cohort(seq);
    const members = cohort === undefined ? [seq] : this.running.filter((s) => this.hints.cohort(s) === cohort);
    for (const member of members) {
      this.running.splice(this.running.indexOf(member), 1);
      this.laneOf.delete(member);
      const row = step.rows.findIndex((r) => r.seq === member);
      if (row >= 0) step.rows.splice(row, 1);
      this.kv.free(member.kv);
      step.preempted.push(member);
      this.preemptions++;
      this.headFirst.add(member);
    }
    this.waiting.unshift(...members);
  }
}

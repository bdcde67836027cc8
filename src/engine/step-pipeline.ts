import type { Batch } from './batch.js';
import { applyKvTransfers, type KvMemory } from './kv/kv-memory.js';
import type { KvCacheManager } from './kv/paged-kv.js';
import { PassFaults } from './pass-faults.js';
import {
  KvLostError,
  settled,
  type DeviceSampling,
  type ModelRunner,
  type StepLogits,
  type StepRow,
} from './runners/model-runner.js';
import type { SampledToken } from './sampling/sampler.js';
import type { Scheduler } from './scheduler.js';
import { NO_LOGITS, type ScheduledRow, type Sequence } from './sequence.js';
import { RunnerUnavailableError } from './runners/runner-unavailable.js';
import type { Proposal, Speculator } from './speculative/speculator.js';
import type { StepHistory } from './step-history.js';

/** The step's counters (EngineStats): the batch and the modes advance the token ones. */
export interface StepCounters {
  prefixHitTokens: number;
  prefillTokens: number;
  generatedTokens: number;
  steps: number;
  lastBatchSize: number;
  lastStepTokens: number;
  /** Speculative tokens verified, and those that stood. */
  proposedTokens: number;
  acceptedTokens: number;
  /** Times the runner's KV memory was lost (a pipeline stage restarted) and every sequence recomputed. */
  kvLosses: number;
}

export function newStepCounters(): StepCounters {
  return {
    prefixHitTokens: 0,
    prefillTokens: 0,
    generatedTokens: 0,
    steps: 0,
    lastBatchSize: 0,
    lastStepTokens: 0,
    proposedTokens: 0,
    acceptedTokens: 0,
    kvLosses: 0,
  };
}

/** What the pipeline runs on: the engine's components, each doing one job. */
export interface StepParts {
  scheduler: Scheduler<Sequence>;
  kv: KvCacheManager;
  /** Where the runner keeps the blocks' bytes: a step's planned copies and restores are executed here. */
  memory: KvMemory;
  runner: ModelRunner;
  batch: Batch;
  speculator: Speculator;
  counters: StepCounters;
  history: StepHistory;
  /** Token ids the model can be asked to generate. */
  samplableVocab: number;
  /** Passes in flight at once (runner.passesInFlight): each lane runs its own sequences' steps. */
  lanes: number;
  /** The runner's KV memory was lost: what is cached beside the pool (sessions, the store queue) is forgotten. */
  forgetCached(): void;
  /** A pass settled: waiting lanes may have work now. */
  settledPass(): void;
}

/** What a model pass gives the step: logits, and the tokens drawn on the device where the runner draws them. */
interface PassOutput {
  logits: StepLogits;
  drawn: Map<Sequence, SampledToken>;
}

/**
 * One engine step as a plain pipeline, vLLM v1's shape: schedule → move the planned KV bytes → propose → one
 * batched pass → each row settled by its request's mode (engine/modes), which samples and streams. The step
 * names no way of generating; lanes (several passes in flight) and a failed pass's rows are handled here.
 */
export class StepPipeline {
  /** Sequences whose pass is in flight: nothing else touches their blocks until it settles. */
  readonly inFlight = new Set<Sequence>();
  /** Bumped when the runner's KV memory is lost: a pass launched before settles as nothing. */
  private kvEpoch = 0;
  /** Proposals of one lane at a time: a draft model's runner takes one pass at a time. */
  private proposing: Promise<unknown> = Promise.resolve();
  /** A failed pass: its rows rerun alone until the one at fault is found (see pass-faults.ts); one per lane. */
  private readonly faults: PassFaults<Sequence>[];

  constructor(private readonly parts: StepParts) {
    const { kv, batch } = parts;
    this.faults = Array.from(
      { length: parts.lanes },
      () =>
        new PassFaults<Sequence>({
          rewind: (seq, length) => kv.truncate(seq.kv, Math.min(length, seq.kv.length)),
          fail: (seq, err) => batch.fail(seq.group, err),
        }),
    );
  }

  /** Runs one step of `lane`'s sequences (all of them with one lane); returns whether a pass ran. */
  async step(lane?: number): Promise<boolean> {
    const { batch, scheduler, counters } = this.parts;
    batch.retireCancelled(this.inFlight);
    const plan = scheduler.schedule(this.parts.lanes === 1 ? undefined : lane);
    applyKvTransfers(this.parts.memory, plan.transfers);
    for (const { seq, cachedTokens } of plan.admitted) {
      counters.prefixHitTokens += cachedTokens;
      if (!seq.admitted) seq.output.cachedTokens = cachedTokens;
      seq.admitted = true;
    }
    const faults = this.faults[lane ?? 0];
    const rows = faults.rowsToRun(plan.rows);
    if (rows.length === 0) return false;

    for (const { seq } of rows) this.inFlight.add(seq);
    const kvEpoch = this.kvEpoch;
    try {
      const proposals = await this.proposeInTurn(rows);
      const starts = rows.map((r) => r.seq.kv.length);
      const fed = rows.map((r) => r.tokens.length);
      for (const [i, row] of rows.entries()) row.tokens.push(...(proposals[i]?.tokens ?? []));
      // The logits are read in the turn the pass returns them: a synchronous runner's lie in scratch that the
      // next pass reuses, and that may be another engine's of the same isolate.
      let pass: PassOutput | Promise<PassOutput>;
      try {
        pass = this.forward(rows, proposals);
        if (pass instanceof Promise) pass = await pass;
      } catch (err) {
        if (kvEpoch !== this.kvEpoch) return this.lostInFlight(rows);
        if (err instanceof KvLostError) {
          for (const { seq } of rows) this.inFlight.delete(seq);
          this.kvLost(err);
          if (err.fatal) for (const { seq } of rows) if (batch.active.has(seq)) batch.fail(seq.group, err);
        } else if (err instanceof RunnerUnavailableError) {
          // Not a row's fault: each row alone would wait for the same host or stage, so all of them end now.
          for (const { seq } of rows) if (batch.active.has(seq)) batch.fail(seq.group, err);
        } else faults.passFailed(rows, starts, err);
        return true;
      }
      if (kvEpoch !== this.kvEpoch) return this.lostInFlight(rows);
      this.settle(rows, proposals, starts, fed, pass);
      return true;
    } finally {
      for (const { seq } of rows) this.inFlight.delete(seq);
      this.parts.settledPass();
    }
  }

  /** Proposals for a step's rows, one lane's at a time. */
  private proposeInTurn(rows: readonly ScheduledRow[]): Promise<(Proposal | undefined)[]> {
    const turn = this.proposing.then(() => this.propose(rows));
    this.proposing = turn.catch(() => undefined);
    return turn;
  }

  /** Proposals for the rows the scheduler gave room to speculate and whose mode asks for some. */
  private async propose(rows: readonly ScheduledRow[]): Promise<(Proposal | undefined)[]> {
    const wanted = rows.map((r) => (r.lookahead > 0 ? r.seq.group.mode.proposal(r.seq, r.lookahead) : undefined));
    const asking = wanted.flatMap((request, i) => (request ? [i] : []));
    const out: (Proposal | undefined)[] = rows.map(() => undefined);
    if (asking.length === 0) return out;
    const proposals = await this.parts.speculator.propose(asking.map((i) => wanted[i]!));
    for (const [k, i] of asking.entries()) out[i] = proposals[k];
    return out;
  }

  /**
   * The model pass. On a runner that draws tokens where the logits are, the rows' modes name the sequences
   * drawn there, and the logits come back only when some row needs them.
   */
  private forward(
    rows: readonly ScheduledRow[],
    proposals: readonly (Proposal | undefined)[],
  ): PassOutput | Promise<PassOutput> {
    const passRows = rows.map((r, i) => ({
      kv: r.seq.kv,
      tokens: r.tokens,
      logits: 1 + (proposals[i]?.tokens.length ?? 0),
    }));
    const { runner } = this.parts;
    const device = runner.deviceSampling;
    if (!device) return settled(runner.forward(passRows), (logits) => ({ logits, drawn: new Map() }));
    return this.forwardOnDevice(device, rows, proposals, passRows);
  }

  private async forwardOnDevice(
    device: DeviceSampling,
    rows: readonly ScheduledRow[],
    proposals: readonly (Proposal | undefined)[],
    passRows: StepRow[],
  ): Promise<PassOutput> {
    const sampling = rows.map((r, i) => r.samples && !r.seq.output.finished && proposals[i] === undefined);
    const draws = rows.flatMap((r, i) =>
      (sampling[i] ? r.seq.group.mode.deviceDraws(r.seq) : []).map((seq) => ({ row: i, seq })),
    );
    const needLogits = rows.some(
      ({ seq }, i) =>
        ((sampling[i] || proposals[i]) && seq.group.mode.wantsLogits(seq, proposals[i] !== undefined)) ||
        (seq.output.promptLogprobs && seq.kv.length + 1 < seq.output.request.promptIds.length),
    );
    const out = await device.forwardAndSample(
      passRows,
      draws.map(({ row, seq }) => ({ row, state: seq.output.deviceSampler!, grammarMask: seq.output.grammarMask() })),
      this.parts.samplableVocab,
      needLogits,
    );
    const drawn = new Map<Sequence, SampledToken>();
    for (const [k, { seq }] of draws.entries()) drawn.set(seq, out.sampled[k]);
    return { logits: out.logits ?? NO_LOGITS, drawn };
  }

  /** Each row after the pass: its prompt's logprobs, then its mode takes its tokens and streams them. */
  private settle(
    rows: readonly ScheduledRow[],
    proposals: readonly (Proposal | undefined)[],
    starts: readonly number[],
    fed: readonly number[],
    { logits, drawn }: PassOutput,
  ): void {
    const { counters, batch } = this.parts;
    counters.steps++;
    counters.lastBatchSize = rows.length;
    counters.lastStepTokens = rows.reduce((n, r) => n + r.tokens.length, 0);
    this.parts.history.push({ step: counters.steps, batch: rows.length, tokens: counters.lastStepTokens });
    for (const [i, { seq, samples }] of rows.entries()) {
      // Gone during this loop: a beam the search dropped when a sibling's logits completed its step.
      if (!batch.active.has(seq)) continue;
      try {
        const start = starts[i];
        const decode = samples && fed[i] === 1 && start >= seq.output.request.promptIds.length;
        if (!decode) counters.prefillTokens += fed[i];
        seq.output.promptLogprobs?.record(start, fed[i], (j) => logits.at(i, j));
        seq.group.mode.settle({
          seq,
          samples,
          settledLength: start + fed[i],
          fed: fed[i],
          at: (j) => logits.at(i, j),
          last: () => logits.last(i),
          hidden: () => logits.hidden?.(i),
          drawn,
          proposal: proposals[i],
        });
      } catch (err) {
        batch.fail(seq.group, err);
      }
    }
  }

  /**
   * The runner's KV memory lost its contents (a pipeline stage restarted): no cached block can be trusted, so
   * the prefix cache and the sessions' kept caches are forgotten and every running sequence is recomputed
   * from its tokens (a slower next token, nothing else). Stored blocks are still good: they restore.
   */
  private kvLost(err: KvLostError): void {
    console.warn(`${err.message}; recomputing every sequence from its tokens`);
    this.parts.counters.kvLosses++;
    this.kvEpoch++;
    this.parts.forgetCached();
    // Sequences in another lane's pass stay until it settles (lostInFlight): their blocks are in that pass.
    this.parts.scheduler.preemptAll((seq) => this.inFlight.has(seq));
    this.parts.kv.pool.uncacheAll();
  }

  /**
   * A pass that was in flight when the KV memory was lost (another lane found it): whatever it computed is
   * dropped, and its sequences, which the loss left running for it, are recomputed too.
   */
  private lostInFlight(rows: readonly ScheduledRow[]): true {
    for (const { seq } of rows) this.inFlight.delete(seq);
    this.parts.scheduler.preemptAll(
      (seq) => this.inFlight.has(seq),
      rows.map((r) => r.seq),
    );
    return true;
  }
}

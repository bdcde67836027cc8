import type { EventQueue } from './event-queue.js';
import type { PagedSequenceKv } from './kv/paged-kv.js';
import type { SampledToken } from './sampling/sampler.js';
import type { Proposal, SpeculationRequest } from './speculative/speculator.js';
import type { StepLogits } from './runners/model-runner.js';
import type { SchedulableSequence, ScheduledStep } from './scheduler.js';
import type { GenerationEvent, SequenceOutput, TokenEvent } from './sequence-output.js';

export type ScheduledRow = ScheduledStep<Sequence>['rows'][number];

/** The n sequences (or the beams) of one request, which share one event stream and one way of generating. */
export interface RequestGroup {
  events: EventQueue<GenerationEvent | Error>;
  cancelRequested: boolean;
  /** Done events the stream waits for: n, or as many candidates as a beam search returns. */
  expectedDone: number;
  /** How the request generates (sampling with forks, beams, speculation), with its state: engine/modes. */
  mode: GenerationMode;
}

/** A sequence inside the engine: what the scheduler sees, plus what every sequence has; the rest is its mode's. */
export interface Sequence extends SchedulableSequence {
  tokens: number[];
  kv: PagedSequenceKv;
  output: SequenceOutput;
  group: RequestGroup;
  admitted: boolean;
  session: string | undefined;
  fairnessGroup: string | undefined;
}

/**
 * What a mode may ask of the engine's batch: the lives of sequences (streaming a token, forking, leaving),
 * never the pass. The engine's Batch is the one implementation.
 */
export interface ModeHost {
  /** Streams a token of `seq` and appends it to its tokens. */
  emit(seq: Sequence, event: TokenEvent): void;
  /** Takes a finished (or cancelled) sequence out of the batch: its done event, its blocks freed or kept for its session. */
  retire(seq: Sequence): void;
  /** Takes a sequence out of the batch with no event of its own (a pruned beam). */
  drop(seq: Sequence): void;
  /** A new sequence continuing `parent` (its cache shared copy-on-write), running beside it or queued behind it. */
  branch(parent: Sequence): Sequence;
  /** `child`, created with `parent`'s request, takes a copy-on-write share of `parent`'s cache and runs from here. */
  fork(parent: Sequence, child: Sequence): void;
  /** Registers the blocks the pass filled in the prefix cache. */
  commit(seq: Sequence): void;
  /** Forgets `seq`'s cache positions from `length` on (rejected proposals). */
  truncate(seq: Sequence, length: number): void;
  readonly counters: { generatedTokens: number; proposedTokens: number; acceptedTokens: number };
}

/** One row of a pass, after it, as its mode settles it. */
export interface SettledRow {
  seq: Sequence;
  /** The pass reached the sequence's last known token: a next token is due. */
  samples: boolean;
  /** Where the cache stood before the pass plus the tokens the pass was fed (proposals not counted). */
  settledLength: number;
  /** Tokens the pass was fed before any proposal. */
  fed: number;
  /** Logits after the row's fed token `index` (proposals included); they throw if they stayed on the device. */
  at(index: number): Float32Array;
  /** Logits after the row's last fed token. */
  last(): Float32Array;
  /** The final-normed hidden states after each fed token ((fed, hidden)); undefined where the runner has none. */
  hidden(): Float32Array | undefined;
  /** Tokens drawn on the device from this row's last logits, by sequence. */
  drawn: ReadonlyMap<Sequence, SampledToken>;
  /** What was proposed after the row's tokens and verified by this pass. */
  proposal: Proposal | undefined;
}

/**
 * A way of generating (vLLM v1's components): plain sampling with n forks, beam search, speculative decoding.
 * One instance per request, holding that request's state; the step asks it and never names a feature.
 */
export interface GenerationMode {
  /** Scheduling: positions wanted beyond `seq`'s tokens in its next pass (proposals to verify). */
  lookahead(seq: Sequence): number;
  /** Scheduling: the sequences `seq` only advances together with (a beam search's), if any. */
  cohort(seq: Sequence): object | undefined;
  /** Batch slots a waiting `seq` will take: itself and the siblings that will fork from it. */
  slots(seq: Sequence): number;
  /** What to propose after `seq`'s tokens, given room for `count` proposals; undefined for none. */
  proposal(seq: Sequence, count: number): SpeculationRequest | undefined;
  /** Sequences whose next token is drawn on the device from `seq`'s row (a runner that samples there). */
  deviceDraws(seq: Sequence): Sequence[];
  /** Whether a sampling row's logits must come back from the device (`proposed`: the pass verifies proposals). */
  wantsLogits(seq: Sequence, proposed: boolean): boolean;
  /** The row after its pass: commit its cache, take its tokens, stream them. */
  settle(row: SettledRow): void;
  /** The request was cancelled: end `seq` (its done event) as the mode ends things. */
  cancel(seq: Sequence): void;
  /** `seq` left the batch (retired, dropped, failed): what the mode holds for it goes. */
  release(seq: Sequence): void;
  /** `seq` was retired with its done event: whatever ends with it ends too (siblings that never forked). */
  retired(seq: Sequence): void;
  /** The request failed: everything the mode still holds for it goes, without events. */
  abandon(): void;
}

/** Logits of a pass whose every row was sampled on the device: nothing may read them. */
export const NO_LOGITS: StepLogits = {
  at: () => {
    throw new Error('these logits stayed on the device');
  },
  last: () => {
    throw new Error('these logits stayed on the device');
  },
};

/** A request's events until it has sent every done event it owes; leaving early calls `cancel`. */
export async function* streamGroup(group: RequestGroup, cancel: () => void): AsyncGenerator<GenerationEvent> {
  let done = 0;
  try {
    while (done < group.expectedDone) {
      const event = await group.events.next();
      if (event instanceof Error) throw event;
      if (event.type === 'done') done++;
      yield event;
    }
  } finally {
    if (done < group.expectedDone) cancel();
  }
}

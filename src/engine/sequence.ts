import type { EventQueue } from './event-queue.js';
import type { PagedSequenceKv } from './kv/paged-kv.js';
import type { GenerationMode } from './modes/generation-mode.js';
import type { StepLogits } from './runners/model-runner.js';
import type { SchedulableSequence, ScheduledStep } from './scheduler.js';
import type { GenerationEvent, SequenceOutput } from './sequence-output.js';

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

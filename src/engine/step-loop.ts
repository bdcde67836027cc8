import { yieldToEventLoop } from './event-loop.js';

/** What the loop drives: the engine's steps, and whether any work or pass in flight remains. */
export interface StepLoopHost {
  /** Runs one step of `lane`'s sequences; false when that lane had nothing to run. */
  step(lane: number): Promise<boolean>;
  hasWork(): boolean;
  /** Passes in flight now (another lane's step may settle and give this one work). */
  inFlight(): number;
  /** A step threw: a bug or a broken runtime, which every request in flight must learn of. */
  failAll(err: Error): void;
}

/**
 * The engine loop: one step loop per lane (a lane per pass the runner takes at once), running while there is
 * work and ending by itself. A lane with nothing of its own waits, without spinning, until another lane's step
 * settles or work arrives (`wake`); with one lane the loop steps and yields as it always did.
 */
export class StepLoop {
  private running = false;
  private signal = wakeSignal();

  constructor(
    private readonly host: StepLoopHost,
    readonly lanes: number,
  ) {}

  /** Work arrived (a request, a cancel): start the loop, or wake its waiting lanes. */
  kick(): void {
    if (this.running) {
      this.wake();
      return;
    }
    this.running = true;
    void Promise.all(Array.from({ length: this.lanes }, (_, lane) => this.runLane(lane))).finally(() => {
      this.running = false;
    });
  }

  /** Something a waiting lane may run changed (a step settled). */
  wake(): void {
    const { resolve } = this.signal;
    this.signal = wakeSignal();
    resolve();
  }

  private async runLane(lane: number): Promise<void> {
    const { host } = this;
    try {
      while (host.hasWork()) {
        const woken = this.signal.promise;
        if (await host.step(lane)) await yieldToEventLoop();
        else if (this.lanes > 1 && host.inFlight() > 0) await woken;
        else await yieldToEventLoop();
      }
    } catch (err) {
      host.failAll(err instanceof Error ? err : new Error(String(err)));
      this.wake();
    }
  }
}

/** A promise and its resolver: lanes wait on one until something may have changed. */
function wakeSignal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

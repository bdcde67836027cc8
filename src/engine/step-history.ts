/** One engine step as the playground draws it: how full the batch was and how many tokens the pass computed. */
export interface StepRecord {
  step: number;
  /** Sequences in the pass (decode rows and prefill chunks). */
  batch: number;
  tokens: number;
}

/**
 * The last few steps, oldest first. A poller that looks twice a second cannot see each step of a loop that
 * runs hundreds per second, so the engine keeps a short record for it; a fixed ring, so it costs nothing to keep.
 */
export class StepHistory {
  private readonly ring: StepRecord[] = [];
  private next = 0;

  constructor(readonly capacity = 64) {}

  push(record: StepRecord): void {
    if (this.ring.length < this.capacity) this.ring.push(record);
    else this.ring[this.next] = record;
    this.next = (this.next + 1) % this.capacity;
  }

  list(): StepRecord[] {
    return this.ring.length < this.capacity
      ? [...this.ring]
      : [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)];
  }
}

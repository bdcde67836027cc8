/** A single-consumer queue from the engine loop (producer) to one request's stream (consumer). */
export class EventQueue<T> {
  private readonly items: T[] = [];
  private waiter: (() => void) | undefined;

  push(item: T): void {
    this.items.push(item);
    this.waiter?.();
    this.waiter = undefined;
  }

  /** Resolves with the next item, waiting for the producer if there is none yet. */
  async next(): Promise<T> {
    while (this.items.length === 0) await new Promise<void>((resolve) => (this.waiter = resolve));
    return this.items.shift()!;
  }
}

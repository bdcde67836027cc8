import { RpcTarget } from 'cloudflare:workers';
import type { WireEvent } from '../objects/generation-run.js';

/**
 * The worker's end of a generation: the object pushes events into it over RPC as they are generated, and
 * the worker reads them in order. Once the reader leaves (the client went away, or stopped reading), a
 * push fails, which is how the object learns to cancel; so does a push into a request context that a
 * disconnect has torn down.
 */
export class EventChannel extends RpcTarget {
  private readonly queue: WireEvent[] = [];
  private ended = false;
  private abandoned = false;
  private wake: (() => void) | undefined;

  push(events: WireEvent[]): void {
    if (this.abandoned) throw new Error('the client went away');
    this.queue.push(...events);
    this.notify();
  }

  close(): void {
    this.ended = true;
    this.notify();
  }

  /**
   * workerd calls this once the object holds no stub of the channel any more. The object closes the
   * channel before it lets go, so an open channel here means the object went away mid-generation
   * (evicted, restarted, redeployed): the reader gets an error instead of waiting forever.
   */
  [Symbol.dispose](): void {
    if (this.ended) return;
    const error = {
      status: 503 as const,
      type: 'server_error',
      message: 'the model shard restarted during the generation; retry',
      param: null,
      code: 'shard_restarted',
    };
    this.queue.push({ type: 'error', error });
    this.close();
  }

  /** The reader is gone: the object's next push fails and it cancels the generation. */
  abandon(): void {
    this.abandoned = true;
    this.ended = true;
    this.notify();
  }

  /** The events in order, until the object closes the channel (or it is abandoned). */
  async *events(): AsyncGenerator<WireEvent> {
    try {
      for (;;) {
        while (this.queue.length > 0 && !this.abandoned) yield this.queue.shift()!;
        if (this.ended) return;
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    } finally {
      if (!this.ended) this.abandon(); // the reader left early
    }
  }

  private notify(): void {
    this.wake?.();
    this.wake = undefined;
  }
}

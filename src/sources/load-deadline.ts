/**
 * Deadlines on reading a model (issue 44): a source that stops sending must not hold a shard's load, and so
 * every request of every key, forever. `stallMs` bounds the wait for each chunk (a response's headers, then
 * each CHUNK_BYTES of its body, or a small file whole); `signal` ends every read at once (the load's total
 * deadline). A read past either throws, and the next request starts a new load.
 */
export interface LoadDeadlines {
  /** Longest wait for the next chunk of a read, in ms. */
  stallMs: number;
  /** Aborted when the whole load is over its deadline. */
  signal?: AbortSignal;
}

/** The error a read ends with when its source stalled past `stallMs` or the load ran out of time. */
export class LoadTimeoutError extends Error {}

/**
 * One read's watchdog: its signal aborts (with a LoadTimeoutError naming `what`) when `touch` has not been
 * called for `stallMs`, or when the load's signal aborts. `done` stops it.
 */
export class StallWatch {
  private readonly controller = new AbortController();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly onLoadAbort = (): void => this.abort(this.deadlines.signal?.reason);

  constructor(
    private readonly deadlines: LoadDeadlines,
    /** The read, as errors name it (`fetching model.onnx at <base>`). */
    readonly what: string,
  ) {
    if (deadlines.signal?.aborted) this.abort(deadlines.signal.reason);
    else deadlines.signal?.addEventListener('abort', this.onLoadAbort, { once: true });
    this.touch();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Bytes arrived: the next chunk has `stallMs` again. */
  touch(): void {
    if (this.controller.signal.aborted) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(
      () =>
        this.abort(
          new LoadTimeoutError(
            `${this.what}: no data for ${this.deadlines.stallMs} ms (MODEL_STALL_TIMEOUT_MS); the next request retries`,
          ),
        ),
      this.deadlines.stallMs,
    );
  }

  /** Throws why the read was stopped, if it was. */
  check(): void {
    if (this.controller.signal.aborted) throw this.controller.signal.reason;
  }

  done(): void {
    clearTimeout(this.timer);
    this.deadlines.signal?.removeEventListener('abort', this.onLoadAbort);
  }

  private abort(reason: unknown): void {
    clearTimeout(this.timer);
    this.controller.abort(
      reason instanceof Error ? reason : new LoadTimeoutError(`${this.what}: the load was stopped`),
    );
  }
}

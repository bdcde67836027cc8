/**
 * What runs the model cannot be reached for now (a GPU host, a pipeline stage that stays away): not the
 * request's fault nor a bug. Every request of the pass ends with it at once (a row alone would meet the same),
 * and the client is told, as a 503 with `code` and Retry-After, to send it again later.
 */
export class RunnerUnavailableError extends Error {
  /** Seconds after which a client may try again (a restarted host or stage answers within a few). */
  readonly retryAfterSeconds: number = 5;

  constructor(
    message: string,
    /** Machine-readable reason, the 503's `code`. */
    readonly code: 'gpu_host_unavailable' | 'stage_unavailable',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** `err` or the first of its causes that is one. */
  static in(err: unknown): RunnerUnavailableError | undefined {
    for (let e = err, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
      if (e instanceof RunnerUnavailableError) return e;
      e = (e as { cause?: unknown }).cause;
    }
    return undefined;
  }
}

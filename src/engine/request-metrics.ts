/** What one request cost, as a user reads it. Times are milliseconds from the request's arrival. */
export interface RequestMetrics {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens whose keys and values came from the cache instead of a prefill. */
  cachedTokens: number;
  /** Arrival to the first generated token. */
  ttftMs: number;
  /** Generated tokens after the first, per second of decoding (0 when fewer than two tokens). */
  decodeTokensPerS: number;
  totalMs: number;
}

const now = (): number => (typeof performance !== 'undefined' ? performance.now() : Date.now());

/**
 * Stamps a request's token times. In workerd, clocks advance only across I/O (a Spectre mitigation),
 * so times measured there are coarse; in Node they are exact.
 */
export class RequestClock {
  private readonly startedAt = now();
  private firstTokenAt: number | undefined;
  private lastTokenAt: number | undefined;
  private tokens = 0;

  token(): void {
    const t = now();
    this.firstTokenAt ??= t;
    this.lastTokenAt = t;
    this.tokens++;
  }

  metrics(promptTokens: number, cachedTokens = 0): RequestMetrics {
    const end = now();
    const first = this.firstTokenAt ?? end;
    const decodeMs = (this.lastTokenAt ?? first) - first;
    return {
      promptTokens,
      completionTokens: this.tokens,
      cachedTokens,
      ttftMs: first - this.startedAt,
      decodeTokensPerS: this.tokens > 1 && decodeMs > 0 ? ((this.tokens - 1) * 1000) / decodeMs : 0,
      totalMs: end - this.startedAt,
    };
  }
}

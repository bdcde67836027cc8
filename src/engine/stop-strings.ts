import { InvalidRequestError } from './errors.js';

/** OpenAI accepts at most 4 stop sequences. */
export const MAX_STOPS = 4;

/**
 * Checks a request's `stop` (a string, an array of up to 4 strings, null or absent) and returns the
 * list; every stop must be a non-empty string. Throws InvalidRequestError('stop', ...) otherwise.
 */
export function validateStops(stop: unknown): string[] {
  if (stop === undefined || stop === null) return [];
  const list: unknown[] = typeof stop === 'string' ? [stop] : Array.isArray(stop) ? stop : [stop];
  if (list.length > MAX_STOPS) {
    throw new InvalidRequestError('stop', `stop accepts at most ${MAX_STOPS} sequences, got ${list.length}`);
  }
  list.forEach((s, i) => {
    if (typeof s !== 'string') throw new InvalidRequestError('stop', `stop[${i}] must be a string, got ${typeof s}`);
    if (s.length === 0) throw new InvalidRequestError('stop', `stop[${i}] must not be empty`);
  });
  return list as string[];
}

export interface StopPush {
  /** Text now safe to show: it cannot be the start of a stop string. */
  emit: string;
  /** A stop string appeared; it and everything after it are dropped, and later pushes emit nothing. */
  stopped: boolean;
}

/**
 * Finds stop strings in streamed text. Text is held back while its tail could still grow into a stop
 * string (at most the longest stop minus one UTF-16 unit), so a stop split over any number of pieces
 * is caught and no part of it is ever emitted. The generation stops at the first stop string to be
 * completed, as when streaming (with stops "bbaa" and "ba", "bbbaa" stops after "bb").
 */
export class StopStringMatcher {
  private readonly stops: string[];
  /** Text received but not yet emitted: always shorter than the longest stop. */
  private held = '';
  private stopped = false;

  /** The list is not capped here (validateStops does that for requests), but empty strings are refused. */
  constructor(stops: readonly string[]) {
    stops.forEach((s, i) => {
      if (typeof s !== 'string' || s.length === 0)
        throw new InvalidRequestError('stop', `stop[${i}] must be a non-empty string`);
    });
    this.stops = [...stops];
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  push(text: string): StopPush {
    if (this.stopped) return { emit: '', stopped: true };
    if (this.stops.length === 0) return { emit: text, stopped: false };
    const buffer = this.held + text;

    // The stop that ENDS first wins (the longest, if several end together): that is the one a
    // character-by-character stream would meet first, so the result never depends on the chunking.
    let cut = -1;
    let end = Infinity;
    for (const stop of this.stops) {
      const at = buffer.indexOf(stop);
      if (at === -1) continue;
      const e = at + stop.length;
      if (e < end || (e === end && at < cut)) {
        end = e;
        cut = at;
      }
    }
    if (cut !== -1) {
      this.stopped = true;
      this.held = '';
      return { emit: buffer.slice(0, cut), stopped: true };
    }

    const keep = this.longestStopPrefixSuffix(buffer);
    this.held = buffer.slice(buffer.length - keep);
    return { emit: buffer.slice(0, buffer.length - keep), stopped: false };
  }

  /** At the end of generation: the held-back text (it never became a stop); '' after a stop. */
  flush(): string {
    const rest = this.stopped ? '' : this.held;
    this.held = '';
    return rest;
  }

  /**
   * Length of the longest suffix of `buffer` that is a proper prefix of some stop. Every later match
   * must begin inside that suffix: any position further left was already ruled out.
   */
  private longestStopPrefixSuffix(buffer: string): number {
    let best = 0;
    for (const stop of this.stops) {
      for (let len = Math.min(stop.length - 1, buffer.length); len > best; len--) {
        if (buffer.endsWith(stop.slice(0, len))) {
          best = len;
          break;
        }
      }
    }
    return best;
  }
}

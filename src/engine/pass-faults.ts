/**
 * What the engine does when a batched model pass throws. The pass cannot say which row broke it, and one
 * request's row (a runner fault confined to its inputs) must not fail the whole batch. So every row of
 * the failed pass is rewound to where its cache stood and becomes a suspect; suspects then run alone, one
 * per step, while the rest of the batch waits. A suspect that fails alone is the fault (its request fails
 * with the error); one that passes alone is cleared and rejoins the batch. A pass of one row that fails
 * is that row's fault at once. Rewinding is exact because a pass only writes positions from the row's
 * start on, and nothing of a failed pass was committed to the prefix cache.
 */
export interface PassFaultHost<S> {
  /** Forgets a sequence's cache positions from `length` on (what the failed pass may have written). */
  rewind(seq: S, length: number): void;
  /** Ends the request of `seq` with `err`, and only it. */
  fail(seq: S, err: unknown): void;
}

export class PassFaults<S> {
  private readonly suspects = new Set<S>();
  /** The suspect whose solo pass ran last: cleared when the next step begins without it having failed. */
  private trial: S | undefined;

  constructor(private readonly host: PassFaultHost<S>) {}

  /** The rows to run this step: all of them, unless suspects wait to be tried, then the first suspect alone. */
  rowsToRun<R extends { seq: S }>(rows: R[]): R[] {
    if (this.trial !== undefined) this.suspects.delete(this.trial);
    this.trial = undefined;
    if (this.suspects.size === 0) return rows;
    const suspect = rows.find((row) => this.suspects.has(row.seq));
    // Suspects gone (finished, cancelled, preempted): nothing left to try.
    if (suspect === undefined) {
      this.suspects.clear();
      return rows;
    }
    this.trial = suspect.seq;
    return [suspect];
  }

  /** The pass over `rows` threw `err`; `starts[i]` is where row i's cache stood before it. */
  passFailed(rows: readonly { seq: S }[], starts: readonly number[], err: unknown): void {
    this.trial = undefined;
    for (const [i, row] of rows.entries()) this.host.rewind(row.seq, starts[i]);
    if (rows.length === 1) {
      this.suspects.delete(rows[0].seq);
      this.host.fail(rows[0].seq, err);
      return;
    }
    for (const row of rows) this.suspects.add(row.seq);
  }

  /** Suspects still waiting for their solo pass. */
  get pending(): number {
    return this.suspects.size;
  }
}

/**
 * Occurrence counts of token ids, kept incrementally: penalties touch only the distinct ids seen, never
 * the whole vocabulary, and nothing is recounted per step.
 */
export class TokenCounts {
  /** (vocabSize) occurrences of each id. */
  readonly counts: Uint32Array;
  /** Ids with a count > 0, in first-seen order. */
  readonly distinct: number[] = [];

  constructor(
    readonly vocabSize: number,
    ids: Iterable<number> = [],
  ) {
    this.counts = new Uint32Array(vocabSize);
    for (const id of ids) this.add(id);
  }

  /** Ids outside [0, vocabSize) (e.g. prompt ids the sampler may not emit) are ignored. */
  add(id: number): void {
    if (!(id >= 0 && id < this.vocabSize)) return;
    if (this.counts[id]++ === 0) this.distinct.push(id);
  }

  count(id: number): number {
    return this.counts[id] ?? 0;
  }
}

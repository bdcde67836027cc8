import { PooledVector } from '../embeddings/pooling.js';
import type { EmbeddingParams } from '../embeddings/embedding-params.js';
import type { GenerationMode, ModeHost, Sequence, SettledRow } from '../sequence.js';
import type { SpeculationRequest } from '../speculative/speculator.js';

/**
 * Embeddings: prefill only. Each pass over the prompt adds its positions' final-normed hidden states to the
 * pooled vector; once the prompt is in, the vector ends the request and the sequence retires, keeping no KV
 * (nothing is committed to the prefix cache, and its blocks go back to the pool). No token is ever sampled.
 */
export class EmbeddingMode implements GenerationMode {
  private readonly vector: PooledVector;

  constructor(
    private readonly host: ModeHost,
    seq: Sequence,
    private readonly params: EmbeddingParams,
  ) {
    this.vector = new PooledVector(params.pooling, params.hiddenSize, seq.output.request.promptIds.length);
  }

  lookahead(_seq: Sequence): number {
    return 0;
  }

  cohort(_seq: Sequence): object | undefined {
    return undefined;
  }

  slots(_seq: Sequence): number {
    return 1;
  }

  proposal(_seq: Sequence, _count: number): SpeculationRequest | undefined {
    return undefined;
  }

  deviceDraws(_seq: Sequence): Sequence[] {
    return [];
  }

  wantsLogits(_seq: Sequence, _proposed: boolean): boolean {
    return false;
  }

  settle(row: SettledRow): void {
    const { seq } = row;
    const hidden = row.hidden();
    // Engine.resolve refuses embeddings on a runner without hidden states: one that gives none here is a bug.
    if (!hidden) throw new Error('the pass gave no hidden states for an embeddings row');
    this.vector.add(hidden, row.settledLength - row.fed);
    if (!row.samples || seq.output.finished) return;
    seq.output.embedded(this.vector.finish(this.params.dimensions));
    this.host.retire(seq);
  }

  cancel(seq: Sequence): void {
    if (seq.output.finished) return;
    seq.output.cancel();
    this.host.retire(seq);
  }

  release(_seq: Sequence): void {}

  retired(_seq: Sequence): void {}

  abandon(): void {}
}

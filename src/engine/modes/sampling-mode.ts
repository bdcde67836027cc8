import type { SampledToken } from '../sampling/sampler.js';
import type { Sequence, GenerationMode, ModeHost, SettledRow } from '../sequence.js';
import type { TokenEvent } from '../sequence-output.js';
import type { SpeculationRequest } from '../speculative/speculator.js';

/**
 * Plain sampling, with n > 1: the request's first sequence prefills the prompt alone, then its siblings fork
 * its cache copy-on-write and each samples from the same logits, its own way (its own seed) from there.
 */
export class SamplingMode implements GenerationMode {
  /** Siblings that fork from a sequence's cache once its prompt is prefilled. */
  private readonly unforked = new Map<Sequence, Sequence[]>();

  constructor(
    protected readonly host: ModeHost,
    first: Sequence,
    siblings: readonly Sequence[],
  ) {
    if (siblings.length > 0) this.unforked.set(first, [...siblings]);
  }

  lookahead(_seq: Sequence): number {
    return 0;
  }

  cohort(_seq: Sequence): object | undefined {
    return undefined;
  }

  slots(seq: Sequence): number {
    return 1 + (this.unforked.get(seq)?.length ?? 0);
  }

  proposal(_seq: Sequence, _count: number): SpeculationRequest | undefined {
    return undefined;
  }

  deviceDraws(seq: Sequence): Sequence[] {
    return [seq, ...(this.unforked.get(seq) ?? [])].filter((s) => s.output.deviceSampler);
  }

  wantsLogits(seq: Sequence, proposed: boolean): boolean {
    return proposed || !seq.output.deviceSampler;
  }

  settle(row: SettledRow): void {
    const { seq } = row;
    this.host.commit(seq);
    if (!row.samples || seq.output.finished) return;
    // The prompt is prefilled: siblings fork its cache now and sample from the same logits.
    const siblings = this.unforked.get(seq) ?? [];
    this.unforked.delete(seq);
    for (const child of siblings) this.host.fork(seq, child);
    for (const s of [seq, ...siblings]) this.sample(s, row.drawn.get(s) ?? row.last());
  }

  cancel(seq: Sequence): void {
    if (seq.output.finished) return;
    seq.output.cancel();
    this.host.retire(seq);
  }

  release(_seq: Sequence): void {}

  retired(seq: Sequence): void {
    // Siblings that never forked (cancelled before the prompt was prefilled) end with it.
    const siblings = this.unforked.get(seq) ?? [];
    this.unforked.delete(seq);
    for (const child of siblings) {
      child.output.cancel();
      this.host.retire(child);
    }
  }

  abandon(): void {
    this.unforked.clear();
  }

  protected sample(seq: Sequence, from: Float32Array | SampledToken): void {
    this.emit(seq, from instanceof Float32Array ? seq.output.onLogits(from) : seq.output.onSampled(from));
    if (seq.output.finished) this.host.retire(seq);
  }

  protected emit(seq: Sequence, event: TokenEvent): void {
    this.host.emit(seq, event);
  }
}

import { BeamGroup } from '../beam/beam-group.js';
import { BeamSearch } from '../beam/beam-search.js';
import type { ResolvedRequest } from '../request.js';
import type { RequestGroup, Sequence, GenerationMode, ModeHost, SettledRow } from '../sequence.js';
import type { SpeculationRequest } from '../speculative/speculator.js';

/**
 * Beam search with length normalisation: the request starts as one sequence and forks into beams as the search
 * goes; the beams advance together (a cohort) and the n best finished hypotheses are streamed at the end.
 */
export class BeamMode implements GenerationMode {
  private readonly beams: BeamGroup<Sequence>;

  constructor(
    private readonly host: ModeHost,
    private readonly group: RequestGroup,
    first: Sequence,
    resolved: ResolvedRequest,
  ) {
    const params = resolved.beam!;
    this.beams = new BeamGroup(
      first,
      resolved.promptIds.length,
      new BeamSearch(params, resolved.maxTokens, resolved.stopTokenIds),
      resolved.sampling,
      { fork: (parent) => host.branch(parent), drop: (beam) => host.drop(beam) },
      resolved.constraint?.matcher([...resolved.stopTokenIds]),
    );
  }

  lookahead(_seq: Sequence): number {
    return 0;
  }

  cohort(_seq: Sequence): object {
    return this;
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
    return true;
  }

  settle(row: SettledRow): void {
    const { seq } = row;
    this.host.commit(seq);
    if (!row.samples || seq.output.finished) return;
    // A beam the search continued earlier in this settling has a token this pass did not compute.
    if (seq.kv.length !== seq.tokens.length) return;
    if (this.beams.onLogits(seq, row.last())) this.end(seq, false);
  }

  cancel(seq: Sequence): void {
    this.end(seq, true);
  }

  release(_seq: Sequence): void {}

  retired(_seq: Sequence): void {}

  abandon(): void {
    this.beams.abandon();
  }

  /** Streams the best candidates (or, cancelled, one cancelled completion) and drops every live beam. */
  private end(seq: Sequence, cancelled: boolean): void {
    const { output } = seq;
    const { group } = this;
    this.beams.abandon();
    if (cancelled) {
      output.cancel();
      group.expectedDone = 1;
      group.events.push(output.done());
      return;
    }
    const best = this.beams.best(output.request.n);
    group.expectedDone = best.length;
    best.forEach((h, index) => {
      this.host.counters.generatedTokens += h.tokens.length;
      group.events.push(
        output.doneWith(h.tokens, h.finishReason, { score: h.score, cumulativeLogprob: h.cumulativeLogprob }, index),
      );
    });
  }
}

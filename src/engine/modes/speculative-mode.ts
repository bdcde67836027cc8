import type { Sequence, ModeHost, SettledRow } from '../sequence.js';
import type { TokenEvent } from '../sequence-output.js';
import type { SpeculationRequest, Speculator } from '../speculative/speculator.js';
import { settleProposals } from '../speculative/verification.js';
import { SamplingMode } from './sampling-mode.js';

/**
 * Speculative decoding: a proposer (prompt lookup, or a draft model) suggests tokens, the target's pass verifies
 * them with the row's own tokens, and what stands is streamed: the output is the target's alone. Sampling with
 * n forks otherwise (a fork speculates too).
 */
export class SpeculativeMode extends SamplingMode {
  /** Proposals each sequence wants per step, from its last token on. */
  private readonly wanted = new Map<Sequence, number>();

  constructor(
    host: ModeHost,
    first: Sequence,
    siblings: readonly Sequence[],
    private readonly speculator: Speculator,
  ) {
    super(host, first, siblings);
  }

  override lookahead(seq: Sequence): number {
    return this.wanted.get(seq) ?? 0;
  }

  override proposal(seq: Sequence, count: number): SpeculationRequest | undefined {
    const { speculative, sampling } = seq.output.request;
    if (!speculative) return undefined;
    return { id: seq.id, tokens: seq.tokens, count, params: speculative, sampling, seed: seq.output.seed };
  }

  override settle(row: SettledRow): void {
    if (!row.proposal) {
      super.settle(row);
      return;
    }
    // Settles the proposals against the target's logits, streams the tokens that stand plus the one the target
    // gives after them, and drops the rejected positions from the cache.
    const { seq, proposal } = row;
    const { events, accepted, verified } = settleProposals(seq.output, proposal, (j) => row.at(row.fed - 1 + j));
    for (const event of events) this.emit(seq, event);
    this.host.counters.proposedTokens += verified;
    this.host.counters.acceptedTokens += accepted;
    this.host.truncate(seq, row.settledLength + accepted);
    this.host.commit(seq);
    if (seq.output.finished) this.host.retire(seq);
  }

  override release(seq: Sequence): void {
    this.wanted.delete(seq);
    this.speculator.release(seq.id);
  }

  protected override emit(seq: Sequence, event: TokenEvent): void {
    super.emit(seq, event);
    const { speculative, maxTokens } = seq.output.request;
    // Proposals past max_tokens would be verified for nothing; one token always comes from the pass itself.
    if (speculative)
      this.wanted.set(seq, Math.max(0, Math.min(speculative.numTokens, maxTokens - seq.output.outputIds.length - 1)));
  }
}

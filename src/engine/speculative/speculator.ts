import type { BlockPoolStats } from '../kv/block-pool.js';
import type { SamplingParams } from '../sampling/sampling-params.js';
import type { DraftModelProposer } from './draft-proposer.js';
import { NgramProposer } from './ngram-proposer.js';
import type { SpeculativeParams } from './speculative-params.js';

/** Tokens proposed to follow a sequence, for the target to verify in its next pass. */
export interface Proposal {
  tokens: number[];
  /** q of each proposed token, when a draft model sampled it; absent entries were proposed deterministically. */
  q: (Float64Array | undefined)[];
}

export interface SpeculationRequest {
  id: number;
  tokens: readonly number[];
  /** Proposals wanted at most (the room the scheduler reserved). */
  count: number;
  params: SpeculativeParams;
  sampling: SamplingParams;
  seed: number;
}

/** Routes each speculating sequence to its proposer; the draft model's passes are batched over all of them. */
export class Speculator {
  private readonly ngram = new NgramProposer();

  constructor(private readonly draft: DraftModelProposer | undefined) {}

  get hasDraftModel(): boolean {
    return this.draft !== undefined;
  }

  async propose(requests: readonly SpeculationRequest[]): Promise<Proposal[]> {
    const proposals = requests.map((r): Proposal => {
      if (r.params.method !== 'ngram') return { tokens: [], q: [] };
      const tokens = this.ngram.propose(r.tokens, r.count);
      return { tokens, q: tokens.map(() => undefined) };
    });
    const drafted = requests.flatMap((r, i) => (r.params.method === 'draft' && this.draft ? [i] : []));
    if (drafted.length > 0 && this.draft) {
      const drafts = await this.draft.propose(drafted.map((i) => requests[i]));
      drafted.forEach((i, k) => {
        proposals[i] = { tokens: drafts[k].map((d) => d.tokenId), q: drafts[k].map((d) => d.q) };
      });
    }
    return proposals;
  }

  draftPoolStats(): BlockPoolStats | undefined {
    return this.draft?.poolStats();
  }

  /** The sequence is gone: its draft cache (if any) goes back to the draft pool. */
  release(id: number): void {
    this.draft?.release(id);
  }
}

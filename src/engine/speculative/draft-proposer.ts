import type { BlockPoolStats } from '../kv/block-pool.js';
import { applyKvTransfers, type KvMemory } from '../kv/kv-memory.js';
import type { KvCacheManager, PagedSequenceKv } from '../kv/paged-kv.js';
import { settled, type ModelRunner } from '../runners/model-runner.js';
import type { SamplingParams } from '../sampling/sampling-params.js';
import { DraftSampler, type DraftToken } from './draft-sampler.js';

/** One sequence asking the draft model for proposals this step. */
export interface DraftRequest {
  /** Stable id of the sequence: its draft cache is kept under it between steps. */
  id: number;
  /** The sequence's tokens so far (prompt + generated); proposals continue them. */
  tokens: readonly number[];
  count: number;
  sampling: SamplingParams;
  seed: number;
}

/** What the draft model holds for one sequence: its cache, and the tokens that cache covers. */
interface DraftState {
  kv: PagedSequenceKv;
  held: number[];
  sampler: DraftSampler;
}

/**
 * Proposals from a smaller model with the same tokenizer. It keeps a paged cache per sequence in a pool
 * of its own; each step it first catches up on the tokens the target settled since its last proposals
 * (after dropping the ones the target rejected), then runs `count` single-token passes, batched over
 * every speculating sequence.
 */
export class DraftModelProposer {
  private readonly states = new Map<number, DraftState>();

  constructor(
    private readonly runner: ModelRunner,
    private readonly kv: KvCacheManager,
    /** The draft pool's bytes: the copies the draft's cache manager plans are moved here before its passes. */
    private readonly memory: KvMemory,
    private readonly samplableVocab: number,
  ) {}

  async propose(requests: readonly DraftRequest[]): Promise<DraftToken[][]> {
    const proposals = requests.map((): DraftToken[] => []);
    const busy = new Set(requests.map((r) => r.id));
    let live = requests.flatMap((request, i) => {
      const state = this.prepare(request, busy);
      return state ? [{ i, state, feed: request.tokens.slice(state.kv.length), count: request.count }] : [];
    });
    applyKvTransfers(this.memory, this.kv.takeTransfers());
    while (live.length > 0) {
      const pass = this.runner.forward(live.map(({ state, feed }) => ({ kv: state.kv, tokens: feed })));
      // Read in the turn the pass returns: a synchronous runner's logits are valid until the next pass.
      await settled(pass, (logits) =>
        live.forEach(({ i, state, feed }, row) => {
          state.held.push(...feed);
          this.kv.commit(state.kv, state.held);
          proposals[i].push(state.sampler.next(logits.last(row).subarray(0, this.samplableVocab)));
        }),
      );
      live = live
        .filter(({ i, count }) => proposals[i].length < count)
        .map((entry) => ({ ...entry, feed: [proposals[entry.i][proposals[entry.i].length - 1].tokenId] }));
    }
    return proposals;
  }

  /** Forgets a sequence (finished, cancelled, preempted for good) and frees its draft cache. */
  release(id: number): void {
    const state = this.states.get(id);
    if (!state) return;
    this.kv.free(state.kv);
    this.states.delete(id);
  }

  /** The draft pool's blocks; `used` counts those held for sequences between steps. */
  poolStats(): BlockPoolStats {
    return this.kv.pool.stats();
  }

  /**
   * Brings a sequence's draft cache in line with its settled tokens (rejected proposals dropped) and
   * reserves room for this step's passes, releasing the caches of sequences not speculating this step
   * (preempted, or between turns) if it must; undefined when there is still no room (no proposals then).
   */
  private prepare(
    { id, tokens, count, sampling, seed }: DraftRequest,
    busy: ReadonlySet<number>,
  ): DraftState | undefined {
    let state = this.states.get(id);
    if (!state) {
      state = { kv: this.kv.create(), held: [], sampler: new DraftSampler(sampling, seed, this.samplableVocab) };
      this.states.set(id, state);
    }
    let common = 0;
    const limit = Math.min(state.held.length, tokens.length - 1);
    while (common < limit && state.held[common] === tokens[common]) common++;
    this.kv.truncate(state.kv, common);
    state.held.length = common;
    if (common === 0) {
      this.kv.free(state.kv);
      state.held.push(...tokens.slice(0, this.kv.matchPrefix(state.kv, tokens)));
    }
    // The catch-up tokens, then count - 1 proposals fed back (the last proposal is never fed).
    const needed = tokens.length - state.kv.length + count - 1;
    while (!this.kv.reserve(state.kv, needed)) {
      const idle = [...this.states.keys()].find((other) => !busy.has(other));
      if (idle === undefined) {
        this.release(id);
        return undefined;
      }
      this.release(idle);
    }
    return state;
  }
}

import type { SamplingParams } from '../sampling/sampling-params.js';
import { beamLogprobs, type BeamHypothesis, type BeamSearch } from './beam-search.js';
import { applyTokenBitmask, type GrammarMatcher } from '../constraints/matcher.js';

/** What a beam group needs from the engine that runs its beams. */
export interface BeamHost<S> {
  /** A new beam continuing `parent`: its tokens copied, its cache shared copy-on-write, in the batch. */
  fork(parent: S): S;
  /** A pruned beam: out of the batch, its blocks given back. */
  drop(beam: S): void;
}

/**
 * The live beams of one beam search request. Every live beam is a sequence in the batch; each reports the
 * logits after its last token as its pass completes (normally all in one pass; a preempted beam a pass or
 * more later). Once all have reported, the search picks the next beams: a beam continued once keeps its
 * sequence, one continued more than once is forked, one not continued is dropped.
 */
export class BeamGroup<S extends { tokens: number[] }> {
  private live: { beam: S; cumulativeLogprob: number }[];
  private readonly reported = new Map<S, Float64Array>();
  /** Structured outputs: each live beam's place in the grammar; a forked beam forks its parent's. */
  private readonly grammars = new Map<S, GrammarMatcher>();

  constructor(
    first: S,
    private readonly promptLength: number,
    private readonly search: BeamSearch,
    private readonly sampling: SamplingParams,
    private readonly host: BeamHost<S>,
    grammar?: GrammarMatcher,
  ) {
    this.live = [{ beam: first, cumulativeLogprob: 0 }];
    if (grammar) this.grammars.set(first, grammar);
  }

  get beams(): S[] {
    return this.live.map((b) => b.beam);
  }

  /** Records `beam`'s next-token logits; runs the step when it was the last to report. True once the search is over. */
  onLogits(beam: S, logits: Float32Array): boolean {
    if (!this.live.some((b) => b.beam === beam)) return false; // dropped: nothing it reports counts
    const grammar = this.grammars.get(beam);
    if (grammar) {
      // Forbidden continuations get log-probability -Infinity, so the search never picks them.
      logits = logits.slice();
      applyTokenBitmask(logits, grammar.nextMask());
    }
    this.reported.set(beam, beamLogprobs(logits, this.sampling));
    if (this.live.some((b) => !this.reported.has(b.beam))) return false;
    const states = this.live.map((b) => ({
      tokens: b.beam.tokens.slice(this.promptLength),
      cumulativeLogprob: b.cumulativeLogprob,
    }));
    const choices = this.search.step(
      states,
      this.live.map((b) => this.reported.get(b.beam)!),
    );
    this.reported.clear();

    // Forks first, while every parent still ends at the token its logits were computed after.
    const continued = new Set<number>();
    const next = choices.map((choice) => {
      const parent = this.live[choice.parent].beam;
      const beam = continued.has(choice.parent) ? this.host.fork(parent) : parent;
      if (beam !== parent && this.grammars.has(parent)) this.grammars.set(beam, this.grammars.get(parent)!.fork());
      continued.add(choice.parent);
      return { beam, token: choice.token, cumulativeLogprob: choice.cumulativeLogprob };
    });
    for (const [i, b] of this.live.entries()) if (!continued.has(i)) this.drop(b.beam);
    for (const { beam, token } of next) {
      beam.tokens.push(token);
      this.grammars.get(beam)?.accept(token);
    }
    this.live = next.map(({ beam, cumulativeLogprob }) => ({ beam, cumulativeLogprob }));
    return this.live.length === 0;
  }

  /** Ends the search early (cancelled): every live beam is dropped. */
  abandon(): void {
    for (const { beam } of this.live) this.drop(beam);
    this.live = [];
    this.reported.clear();
  }

  private drop(beam: S): void {
    this.grammars.get(beam)?.dispose();
    this.grammars.delete(beam);
    this.host.drop(beam);
  }

  best(n: number): BeamHypothesis[] {
    return this.search.best(n);
  }
}

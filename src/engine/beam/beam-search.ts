import type { SamplingParams } from '../sampling/sampling-params.js';
import { logSumExp } from '../sampling/logprobs.js';
import { applyAllowedTokens, applyLogitBias, copySanitized } from '../sampling/processors.js';
import type { BeamParams } from './beam-params.js';

/** A live beam as the search sees it: what it generated and its summed log-probability. */
export interface BeamState {
  /** Generated tokens (not the prompt). */
  tokens: readonly number[];
  cumulativeLogprob: number;
}

/** A finished candidate. */
export interface BeamHypothesis {
  tokens: number[];
  cumulativeLogprob: number;
  /** cumulativeLogprob / length^α: what candidates are ranked by. */
  score: number;
  finishReason: 'stop' | 'length';
}

/** Next step's beams: each continues live beam `parent` with `token`. */
export interface BeamChoice {
  parent: number;
  token: number;
  cumulativeLogprob: number;
}

/**
 * Log-softmax (float64) of one row of logits after logit_bias and allowed_token_ids: the log-probability
 * beams are scored with. Disallowed tokens are -Infinity and never chosen.
 */
export function beamLogprobs(logits: Float32Array, sampling: SamplingParams): Float64Array {
  const work = new Float32Array(logits.length);
  copySanitized(logits, work);
  applyLogitBias(work, sampling.logitBias);
  applyAllowedTokens(work, sampling.allowedTokenIds);
  const lse = logSumExp(work);
  return Float64Array.from(work, (v) => v - lse);
}

/**
 * Beam search bookkeeping, free of models and caches: from each live beam's log-probabilities it picks
 * the next beams and keeps the best finished candidates (HF's BeamSearchScorer, for one prompt).
 *
 * Each step ranks every continuation of every live beam by summed log-probability and walks the best
 * 2k: a stop token ranked within the top k finishes a candidate; other continuations become the next k
 * beams; a beam reaching max_tokens finishes as a `length` candidate. The length of a candidate is its
 * generated tokens not counting a final stop token (at least 1), as in HF and vLLM.
 */
export class BeamSearch {
  private readonly finished: BeamHypothesis[] = [];

  constructor(
    private readonly params: BeamParams,
    private readonly maxTokens: number,
    private readonly stopTokenIds: ReadonlySet<number>,
  ) {}

  /**
   * One step. `beams[i]` continues with log-probabilities `logprobs[i]`. Returns the next live beams
   * (those finished are recorded, not returned); [] once the search is done.
   */
  step(beams: readonly BeamState[], logprobs: readonly Float64Array[]): BeamChoice[] {
    const k = this.params.width;
    const candidates = topContinuations(beams, logprobs, 2 * k);
    const next: BeamChoice[] = [];
    let kept = 0; // continuations taken, including those that finish at max_tokens
    for (let rank = 0; rank < candidates.length && kept < k; rank++) {
      const c = candidates[rank];
      const tokens = [...beams[c.parent].tokens, c.token];
      if (this.stopTokenIds.has(c.token)) {
        if (rank < k) this.add(tokens, c.cumulativeLogprob, 'stop');
        continue;
      }
      kept++;
      if (tokens.length >= this.maxTokens) this.add(tokens, c.cumulativeLogprob, 'length');
      else next.push(c);
    }
    // As HF: the best continuation of all (stop tokens included), at the length before this step's token.
    if (next.length === 0 || this.isDone(candidates[0].cumulativeLogprob, beams[0].tokens.length)) return [];
    return next;
  }

  /** The best `n` candidates, best first. */
  best(n: number): BeamHypothesis[] {
    return this.finished.slice(0, n);
  }

  private score(tokens: readonly number[], cumulativeLogprob: number, length = this.lengthOf(tokens)): number {
    return cumulativeLogprob / length ** this.params.lengthPenalty;
  }

  private lengthOf(tokens: readonly number[]): number {
    const last = tokens[tokens.length - 1];
    return Math.max(1, tokens.length - (last !== undefined && this.stopTokenIds.has(last) ? 1 : 0));
  }

  /** Keeps the k best candidates, sorted best first (ties: the earlier found stays ahead). */
  private add(tokens: number[], cumulativeLogprob: number, finishReason: BeamHypothesis['finishReason']): void {
    const hypothesis = { tokens, cumulativeLogprob, score: this.score(tokens, cumulativeLogprob), finishReason };
    let at = this.finished.length;
    while (at > 0 && this.finished[at - 1].score < hypothesis.score) at--;
    this.finished.splice(at, 0, hypothesis);
    if (this.finished.length > this.params.width) this.finished.pop();
  }

  /** Whether no live beam can still beat the worst kept candidate (HF's BeamHypotheses.is_done). */
  private isDone(bestLiveLogprob: number, length: number): boolean {
    const k = this.params.width;
    if (this.finished.length < k) return false;
    const { earlyStopping, lengthPenalty } = this.params;
    if (earlyStopping === true) return true;
    // Log-probabilities only fall as a beam grows; with α > 0 a longer length divides them less.
    const bestLength = earlyStopping === 'never' && lengthPenalty > 0 ? this.maxTokens : Math.max(1, length);
    return this.finished[k - 1].score >= bestLiveLogprob / bestLength ** lengthPenalty;
  }
}

/** The `count` best (beam, token) continuations by summed log-probability, best first; ties by beam, then token. */
function topContinuations(beams: readonly BeamState[], logprobs: readonly Float64Array[], count: number): BeamChoice[] {
  const best: BeamChoice[] = [];
  const worse = (a: BeamChoice, b: BeamChoice): boolean =>
    a.cumulativeLogprob < b.cumulativeLogprob ||
    (a.cumulativeLogprob === b.cumulativeLogprob &&
      (a.parent > b.parent || (a.parent === b.parent && a.token > b.token)));
  beams.forEach((beam, parent) => {
    const row = logprobs[parent];
    for (let token = 0; token < row.length; token++) {
      if (!(row[token] > -Infinity)) continue;
      const c = { parent, token, cumulativeLogprob: beam.cumulativeLogprob + row[token] };
      if (best.length === count && !worse(best[count - 1], c)) continue;
      let at = best.length;
      while (at > 0 && worse(best[at - 1], c)) at--;
      best.splice(at, 0, c);
      if (best.length > count) best.pop();
    }
  });
  return best;
}

/**
 * Token sampling for one sequence: logits processors, then greedy or a seeded random draw.
 *
 * Order, per step (each stage is skipped when its parameter is neutral):
 *   0. copy the model's logits into scratch, NaN -> -Infinity, +Infinity -> largest float32
 *      (logprobs are taken here, from these RAW logits: log-softmax before any processor, as vLLM)
 *   1. logit_bias                    logit[id] += bias; allowed_token_ids: all others -Infinity;
 *                                    a grammar's token bitmask (structured outputs): forbidden ids -Infinity
 *   2. repetition_penalty            over prompt + generated ids (positive / p, negative * p)
 *   3. frequency / presence penalty  over generated ids (OpenAI formula)
 *   4. temperature == 0  ->  greedy: argmax, lowest id on ties; stages 5-9 skipped
 *   5. temperature                   (logit - max) / T
 *   6. top_k                         ties with the kth value kept
 *   7. top_p                         smallest top set with mass >= p
 *   8. min_p                         p >= min_p x p_top
 *   9. softmax over the survivors, inverse CDF with the seeded PRNG, walking ids in ascending order
 * If nothing survives (impossible for validated params, guarded anyway), greedy on the raw logits.
 * The chosen token is then recorded for the penalties of the following steps.
 */
import type { SamplingParams } from './sampling-params.js';
import {
  applyAllowedTokens,
  applyFrequencyPresencePenalties,
  applyLogitBias,
  applyMinP,
  applyRepetitionPenalty,
  applyTemperature,
  applyTopK,
  applyTopP,
  argmax,
  copySanitized,
  sanitizedArgmax,
} from './processors.js';
import { logSumExp, topLogprobs, type TokenLogprob } from './logprobs.js';
import { applyTokenBitmask, firstAllowed, maskAllows } from '../constraints/matcher.js';
import { randomSeed, Xoshiro128 } from './rng.js';
import { TokenCounts } from './token-counts.js';

export type { TokenLogprob } from './logprobs.js';

export interface SampledToken {
  tokenId: number;
  /** Log-softmax of the raw logits at tokenId; only when params.logprobs. */
  logprob?: number;
  /** The params.topLogprobs most likely tokens under the raw logits ([] for 0); only when params.logprobs. */
  topLogprobs?: TokenLogprob[];
}

export interface TokenSamplerOptions {
  /** Logits rows passed to sample() have exactly this length. */
  vocabSize: number;
  /** Counted for repetition_penalty; ids outside [0, vocabSize) are ignored. */
  promptTokenIds: readonly number[];
}

/**
 * The rows one sample() or verify() call works in. Each call fills them before it reads them and nothing
 * reads them after it returns, and calls never interleave (they do not await), so every sampler of a
 * vocabulary size shares one set: 20 bytes per vocabulary entry once, where one set per sequence cost
 * 1 MiB per stream at a 49,152-token vocabulary (16 MiB of a 128 MiB isolate at 16 streams).
 */
class SamplerRows {
  private static readonly bySize = new Map<number, SamplerRows>();

  /** (vocab) sanitised copy of the model's logits. */
  readonly raw: Float32Array;
  /** (vocab) the processors' working row. */
  readonly work: Float32Array;
  /** (vocab) unnormalised probabilities of the final draw. */
  readonly weights: Float64Array;

  private constructor(vocabSize: number) {
    this.raw = new Float32Array(vocabSize);
    this.work = new Float32Array(vocabSize);
    this.weights = new Float64Array(vocabSize);
  }

  static of(vocabSize: number): SamplerRows {
    let rows = SamplerRows.bySize.get(vocabSize);
    if (!rows) {
      rows = new SamplerRows(vocabSize);
      SamplerRows.bySize.set(vocabSize, rows);
    }
    return rows;
  }
}

export class TokenSampler {
  /** The seed actually used (drawn from crypto when the request gave none), for reproduction. */
  readonly seed: number;
  private readonly rng: Xoshiro128;
  private readonly vocabSize: number;
  /** Prompt + generated ids: what repetition_penalty looks at (empty when it is 1). */
  private readonly seen: TokenCounts;
  /** Generated ids only: what frequency / presence penalties look at (empty when both are 0). */
  private readonly generated: TokenCounts;
  /** Scratch rows, shared with every sampler of this vocabulary size: valid only within one call. */
  private readonly rows: SamplerRows;

  constructor(
    readonly params: SamplingParams,
    opts: TokenSamplerOptions,
  ) {
    this.vocabSize = opts.vocabSize;
    this.seed = params.seed ?? randomSeed();
    this.rng = new Xoshiro128(this.seed);
    const penalised = params.frequencyPenalty !== 0 || params.presencePenalty !== 0;
    this.generated = new TokenCounts(penalised ? opts.vocabSize : 0);
    this.seen = new TokenCounts(params.repetitionPenalty === 1 ? 0 : opts.vocabSize, opts.promptTokenIds);
    this.rows = SamplerRows.of(opts.vocabSize);
    this.plainGreedy =
      params.temperature === 0 &&
      params.logitBias.size === 0 &&
      params.allowedTokenIds === undefined &&
      params.repetitionPenalty === 1 &&
      !penalised &&
      !params.logprobs;
  }

  /**
   * Greedy with no processor that could change a logit and no logprobs to report: the token is the sanitised row's
   * argmax, taken in one pass over the logits (sanitizedArgmax) without filling the scratch rows. Under a grammar's
   * mask the full path runs.
   */
  private readonly plainGreedy: boolean;

  /** The plain greedy token of this row, or undefined where the full path must run. */
  private plainGreedyToken(logits: Float32Array, mask: Int32Array | undefined): number | undefined {
    if (!this.plainGreedy || mask) return undefined;
    this.checkRow(logits);
    this.mask = undefined;
    return sanitizedArgmax(logits);
  }

  private checkRow(logits: Float32Array): void {
    if (logits.length !== this.vocabSize) {
      throw new RangeError(`logits row has ${logits.length} entries, the sampler was built for ${this.vocabSize}`);
    }
  }

  /** The grammar's bitmask for the current call (structured outputs), or undefined. */
  private mask: Int32Array | undefined;

  /**
   * Picks the next token from one (vocab) row of logits (left untouched) and records it. `mask`: a
   * grammar's allowed tokens (bit i of word i >> 5); the token drawn is always one it allows.
   */
  sample(logits: Float32Array, mask?: Int32Array): SampledToken {
    const plain = this.plainGreedyToken(logits, mask);
    if (plain !== undefined) return this.record(plain);
    this.mask = mask;
    const work = this.process(logits);
    let tokenId: number;
    if (this.params.temperature === 0) tokenId = this.greedy(work);
    else {
      tokenId = this.drawFrom(this.warp(work), -1);
      if (tokenId < 0) tokenId = this.fallback();
    }
    return this.record(tokenId);
  }

  /**
   * Speculative verification: does `proposed` stand as the token after these (target) logits? `draft` is
   * the distribution the proposer drew it from; none means it was proposed deterministically (q = 1 on
   * it). Greedy: it stands iff it is the argmax, which replaces it otherwise. Sampling: the rule of
   * Leviathan et al. and Chen et al.: it stands with probability min(1, p/q), else a token is drawn from
   * normalise(max(0, p - q)). Either way the token is distributed exactly as sample() would draw it.
   * Records the token like sample().
   */
  verify(
    logits: Float32Array,
    proposed: number,
    draft?: Float64Array,
    mask?: Int32Array,
  ): SampledToken & { accepted: boolean } {
    const plain = this.plainGreedyToken(logits, mask);
    if (plain !== undefined) return { ...this.record(plain), accepted: plain === proposed };
    this.mask = mask;
    const work = this.process(logits);
    if (this.params.temperature === 0) {
      const tokenId = this.greedy(work);
      return { ...this.record(tokenId), accepted: tokenId === proposed };
    }
    const total = this.warp(work);
    const weights = this.rows.weights;
    const p = total > 0 ? weights[proposed] / total : 0;
    const q = draft ? draft[proposed] : 1;
    if (q > 0 && this.rng.nextFloat() * q < p) return { ...this.record(proposed), accepted: true };
    // Rejected: the residual max(0, p - q), unnormalised, over the same weights.
    let residual = 0;
    for (let i = 0; i < weights.length; i++) {
      const w = Math.max(0, weights[i] / total - (draft ? draft[i] : i === proposed ? 1 : 0));
      weights[i] = w;
      residual += w;
    }
    // p == q exactly leaves no residual, but then the proposal was accepted with probability 1.
    let tokenId = residual > 0 ? this.drawFrom(residual, proposed) : proposed;
    // A proposal the grammar forbids has p = 0; should no residual remain, it still may not stand.
    if (tokenId < 0 || (this.mask && !maskAllows(this.mask, tokenId))) tokenId = this.fallback();
    return { ...this.record(tokenId), accepted: false };
  }

  /** Stages 0-3: sanitised raw logits into `raw`, then bias and penalties into `work`. */
  private process(logits: Float32Array): Float32Array {
    this.checkRow(logits);
    const { raw, work } = this.rows;
    const params = this.params;
    copySanitized(logits, raw);
    work.set(raw);
    applyLogitBias(work, params.logitBias);
    applyAllowedTokens(work, params.allowedTokenIds);
    if (this.mask) applyTokenBitmask(work, this.mask);
    applyRepetitionPenalty(work, this.seen, params.repetitionPenalty);
    applyFrequencyPresencePenalties(work, this.generated, params.frequencyPenalty, params.presencePenalty);
    return work;
  }

  private greedy(work: Float32Array): number {
    const tokenId = argmax(work);
    return work[tokenId] > -Infinity ? tokenId : this.fallback();
  }

  /** Nothing survived the processors: the raw argmax, or under a grammar the lowest id it allows. */
  private fallback(): number {
    if (!this.mask) return argmax(this.rows.raw);
    const id = firstAllowed(this.mask, this.vocabSize);
    return id >= 0 ? id : argmax(this.rows.raw);
  }

  /** Stages 5-9 up to the draw: fills `weights` with softmax numerators of the survivors; returns their sum. */
  private warp(work: Float32Array): number {
    const { params } = this;
    applyTemperature(work, params.temperature);
    applyTopK(work, params.topK);
    applyTopP(work, params.topP);
    applyMinP(work, params.minP);
    let max = -Infinity;
    for (let i = 0; i < work.length; i++) if (work[i] > max) max = work[i];
    const weights = this.rows.weights;
    let total = 0;
    for (let i = 0; i < work.length; i++) {
      const w = max > -Infinity && work[i] > -Infinity ? Math.exp(work[i] - max) : 0;
      weights[i] = w;
      total += w;
    }
    return total;
  }

  /** Records the chosen token for the penalties and reports its logprobs. */
  private record(tokenId: number): SampledToken {
    this.accept(tokenId);
    const out: SampledToken = { tokenId };
    if (this.params.logprobs) {
      const lse = logSumExp(this.rows.raw);
      out.logprob = this.rows.raw[tokenId] - lse;
      out.topLogprobs = topLogprobs(this.rows.raw, this.params.topLogprobs, lse);
    }
    return out;
  }

  /**
   * Records a generated token for the penalties. sample() already does this; call it only for tokens
   * appended without sample() (e.g. forced or accepted speculative tokens).
   */
  accept(tokenId: number): void {
    this.generated.add(tokenId);
    if (this.params.repetitionPenalty !== 1) this.seen.add(tokenId);
  }

  /** Inverse CDF over `weights` (summing to `total`), ids ascending; `empty` when every weight is 0. */
  private drawFrom(total: number, empty: number): number {
    if (!(total > 0)) return empty;
    const weights = this.rows.weights;
    // Same values summed in the same order as `total`, so the walk always ends inside the loop.
    const u = this.rng.nextFloat() * total;
    let cumulative = 0;
    let last = empty;
    for (let i = 0; i < weights.length; i++) {
      const w = weights[i];
      if (w === 0) continue;
      cumulative += w;
      last = i;
      if (cumulative > u) return i;
    }
    return last;
  }
}

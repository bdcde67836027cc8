/**
 * Token sampling for one sequence: logits processors, then greedy or a seeded random draw.
 *
 * Order, per step (each stage is skipped when its parameter is neutral):
 *   0. copy the model's logits into scratch, NaN -> -Infinity, +Infinity -> largest float32
 *      (logprobs are taken here, from these RAW logits: log-softmax before any processor, as vLLM)
 *   1. logit_bias                    logit[id] += bias
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
import type { SamplingParams } from './params.js';
import {
  applyFrequencyPresencePenalties,
  applyLogitBias,
  applyMinP,
  applyRepetitionPenalty,
  applyTemperature,
  applyTopK,
  applyTopP,
  argmax,
} from './processors.js';
import { logSumExp, topLogprobs, type TokenLogprob } from './logprobs.js';
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

const FLOAT32_MAX = 3.4028234663852886e38;

export class TokenSampler {
  /** The seed actually used (drawn from crypto when the request gave none), for reproduction. */
  readonly seed: number;
  private readonly rng: Xoshiro128;
  private readonly vocabSize: number;
  /** Prompt + generated ids: what repetition_penalty looks at. */
  private readonly seen: TokenCounts;
  /** Generated ids only: what frequency / presence penalties look at. */
  private readonly generated: TokenCounts;
  /** (vocab) sanitised copy of the model's logits. */
  private readonly raw: Float32Array;
  /** (vocab) the processors' working row. */
  private readonly work: Float32Array;
  /** (vocab) unnormalised probabilities of the final draw. */
  private readonly weights: Float64Array;

  constructor(
    readonly params: SamplingParams,
    opts: TokenSamplerOptions,
  ) {
    this.vocabSize = opts.vocabSize;
    this.seed = params.seed ?? randomSeed();
    this.rng = new Xoshiro128(this.seed);
    this.generated = new TokenCounts(opts.vocabSize);
    this.seen = new TokenCounts(params.repetitionPenalty === 1 ? 0 : opts.vocabSize, opts.promptTokenIds);
    this.raw = new Float32Array(opts.vocabSize);
    this.work = new Float32Array(opts.vocabSize);
    this.weights = new Float64Array(opts.vocabSize);
  }

  /** Picks the next token from one (vocab) row of logits (left untouched) and records it. */
  sample(logits: Float32Array): SampledToken {
    if (logits.length !== this.vocabSize) {
      throw new RangeError(`logits row has ${logits.length} entries, the sampler was built for ${this.vocabSize}`);
    }
    const { raw, work, params } = this;
    for (let i = 0; i < raw.length; i++) {
      const v = logits[i];
      raw[i] = v === v ? (v === Infinity ? FLOAT32_MAX : v) : -Infinity;
    }
    work.set(raw);

    applyLogitBias(work, params.logitBias);
    applyRepetitionPenalty(work, this.seen, params.repetitionPenalty);
    applyFrequencyPresencePenalties(work, this.generated, params.frequencyPenalty, params.presencePenalty);

    let tokenId: number;
    if (params.temperature === 0) {
      tokenId = argmax(work);
      if (!(work[tokenId] > -Infinity)) tokenId = argmax(raw);
    } else {
      applyTemperature(work, params.temperature);
      applyTopK(work, params.topK);
      applyTopP(work, params.topP);
      applyMinP(work, params.minP);
      tokenId = this.draw(work);
      if (tokenId < 0) tokenId = argmax(raw);
    }

    this.accept(tokenId);
    const out: SampledToken = { tokenId };
    if (params.logprobs) {
      const lse = logSumExp(raw);
      out.logprob = raw[tokenId] - lse;
      out.topLogprobs = topLogprobs(raw, params.topLogprobs, lse);
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

  /** Inverse CDF over softmax(logits), ids ascending; -1 when every logit is -Infinity. */
  private draw(logits: Float32Array): number {
    let max = -Infinity;
    for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
    if (max === -Infinity) return -1;
    const weights = this.weights;
    let total = 0;
    for (let i = 0; i < logits.length; i++) {
      const w = logits[i] > -Infinity ? Math.exp(logits[i] - max) : 0;
      weights[i] = w;
      total += w;
    }
    // Same values summed in the same order as `total`, so the walk always ends inside the loop.
    const u = this.rng.nextFloat() * total;
    let cumulative = 0;
    let last = -1;
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

import type { SamplingParams } from '../sampling/sampling-params.js';
import {
  applyAllowedTokens,
  applyLogitBias,
  copySanitized,
  applyMinP,
  applyTemperature,
  applyTopK,
  applyTopP,
  argmax,
} from '../sampling/processors.js';
import { Xoshiro128 } from '../sampling/rng.js';

/** A draft token and, when sampling, the distribution q it was drawn from (what verification needs). */
export interface DraftToken {
  tokenId: number;
  /** (vocab) q, normalised; absent for greedy, where verification compares against the argmax only. */
  q?: Float64Array;
}

/**
 * Draws a draft model's proposals. q may be any distribution as long as the proposal is drawn from it
 * and verification is told it, so this applies the request's bias and warpers (temperature, top-k,
 * top-p, min-p: what brings q close to the target's p) but not its penalties, whose state belongs to
 * the target's sampler. Its PRNG stream is its own, seeded from the request's seed.
 */
export class DraftSampler {
  private readonly rng: Xoshiro128;
  private readonly work: Float32Array;

  constructor(
    private readonly params: SamplingParams,
    seed: number,
    private readonly vocabSize: number,
  ) {
    this.rng = new Xoshiro128((seed ^ 0x5bd1e995) >>> 0);
    this.work = new Float32Array(vocabSize);
  }

  next(logits: Float32Array): DraftToken {
    const work = this.work;
    copySanitized(logits, work);
    applyLogitBias(work, this.params.logitBias);
    applyAllowedTokens(work, this.params.allowedTokenIds);
    if (this.params.temperature === 0) return { tokenId: argmax(work) };
    applyTemperature(work, this.params.temperature);
    applyTopK(work, this.params.topK);
    applyTopP(work, this.params.topP);
    applyMinP(work, this.params.minP);
    const q = new Float64Array(this.vocabSize);
    let total = 0;
    for (let i = 0; i < q.length; i++) {
      q[i] = work[i] > -Infinity ? Math.exp(work[i]) : 0; // after temperature every logit is <= 0
      total += q[i];
    }
    if (!(total > 0)) return { tokenId: argmax(logits.subarray(0, this.vocabSize)) };
    const u = this.rng.nextFloat() * total;
    let cumulative = 0;
    let tokenId = -1;
    for (let i = 0; i < q.length; i++) {
      if (q[i] === 0) continue;
      cumulative += q[i];
      tokenId = i;
      if (cumulative > u) break;
    }
    for (let i = 0; i < q.length; i++) q[i] /= total;
    return { tokenId, q };
  }
}

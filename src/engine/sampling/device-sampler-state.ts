import type { SamplingParams } from './sampling-params.js';
import { randomSeed, Xoshiro128 } from './rng.js';
import { TokenCounts } from './token-counts.js';

/** struct Settings in shaders/sample.wgsl: 18 x 4 bytes. */
export const SETTINGS_BYTES = 72;

/**
 * A sequence's sampler state where tokens are drawn on the device (runners/webgpu/device-sampler.ts draws
 * them): the same seed and xoshiro128** stream as TokenSampler, the same prompt + generated counts for the
 * penalties, and each step's settings in the layout the sampling kernel reads. Sampling state, not a runner's:
 * the engine holds it.
 */
export class DeviceSamplerState {
  readonly seed: number;
  private readonly vocabSize: number;
  private readonly rng: Xoshiro128;
  /** Prompt + generated ids: repetition_penalty. */
  private readonly seen: TokenCounts;
  /** Generated ids: frequency / presence penalties. */
  private readonly generated: TokenCounts;

  constructor(
    readonly params: SamplingParams,
    opts: { vocabSize: number; promptTokenIds: readonly number[] },
  ) {
    this.vocabSize = opts.vocabSize;
    this.seed = params.seed ?? randomSeed();
    this.rng = new Xoshiro128(this.seed);
    this.generated = new TokenCounts(opts.vocabSize);
    this.seen = new TokenCounts(params.repetitionPenalty === 1 ? 0 : opts.vocabSize, opts.promptTokenIds);
  }

  /**
   * This step's kernel settings (consumes the draw's random number) and sparse lists. `grammarMask`: the
   * tokens a grammar allows now (structured outputs), bit i of word i >> 5; combined with allowed_token_ids.
   */
  next(grammarMask?: Int32Array): {
    settings: ArrayBuffer;
    bias: [number, number][];
    seen: number[];
    generated: [number, number][];
    allowedMask: Uint32Array | undefined;
  } {
    const p = this.params;
    const u = p.temperature === 0 ? 0 : this.rng.nextFloat();
    const settings = new ArrayBuffer(SETTINGS_BYTES);
    const f = new Float32Array(settings);
    const i = new Uint32Array(settings);
    f[0] = p.temperature;
    i[1] = p.topK;
    f[2] = p.topP;
    f[3] = p.minP;
    f[4] = p.frequencyPenalty;
    f[5] = p.presencePenalty;
    f[6] = p.repetitionPenalty;
    f[7] = u;
    i[14] = p.logprobs ? p.topLogprobs : 0;
    i[15] = p.logprobs ? 1 : 0;
    let allowedMask: Uint32Array | undefined;
    if (p.allowedTokenIds) {
      allowedMask = new Uint32Array(Math.ceil(this.vocabSize / 32));
      for (const id of p.allowedTokenIds) if (id >= 0 && id < this.vocabSize) allowedMask[id >>> 5] |= 1 << (id & 31);
    }
    if (grammarMask) {
      const words = Math.ceil(this.vocabSize / 32);
      const grammar = new Uint32Array(grammarMask.buffer, grammarMask.byteOffset, Math.min(words, grammarMask.length));
      if (allowedMask) for (let w = 0; w < words; w++) allowedMask[w] &= grammar[w] ?? 0;
      else {
        allowedMask = new Uint32Array(words);
        allowedMask.set(grammar);
      }
    }
    return {
      allowedMask,
      settings,
      bias: [...p.logitBias],
      seen: p.repetitionPenalty === 1 ? [] : this.seen.distinct,
      generated:
        p.frequencyPenalty === 0 && p.presencePenalty === 0
          ? []
          : this.generated.distinct.map((id) => [id, this.generated.counts[id]]),
    };
  }

  /** Records a token for the penalties (sample() does; call it for tokens appended without it). */
  accept(tokenId: number): void {
    this.generated.add(tokenId);
    if (this.params.repetitionPenalty !== 1) this.seen.add(tokenId);
  }
}

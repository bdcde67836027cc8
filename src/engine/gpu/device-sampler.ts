import type { SamplingParams } from '../sampling/sampling-params.js';
import { randomSeed, Xoshiro128 } from '../sampling/rng.js';
import type { SampledToken } from '../sampling/sampler.js';
import { TokenCounts } from '../sampling/token-counts.js';
import type { WgslKernels } from './wgsl-kernels.js';
import { readBuffer } from './wgsl-kernels.js';
import { BufferUsage } from './usage.js';

/**
 * Sampling on the device (shaders/sample.wgsl, shaders/greedy.wgsl): the logits stay where the model
 * wrote them; only each row's token id (and logprobs, when asked) come back.
 *
 * Per-sequence state mirrors TokenSampler's: the same seed and xoshiro128** stream (one nextFloat()
 * per sampled, non-greedy token, as TokenSampler.draw takes it), the same prompt + generated counts for
 * the penalties. Hence a seeded request samples the same tokens as the CPU sampler, except when a value
 * lands within float32 rounding of a cut (the kernel sums in float32; see sample.wgsl).
 *
 * In the engine: a Sequence sampling on the device holds a DeviceSamplerState instead of a TokenSampler;
 * after each pass the engine draws every such row's token with one DeviceSampler.sample() call
 * (GpuRunner.forwardAndSample) and hands the results to the sequences (Sequence.onSampled).
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

const SETTINGS_BYTES = 72; // struct Settings in sample.wgsl: 18 x 4 bytes
const MAX_TOP = 20;
const STORAGE = BufferUsage.STORAGE;

export class DeviceSampler {
  constructor(
    private readonly kernels: WgslKernels,
    /** Logits per row in the buffer (the model's vocab_size). */
    private readonly vocab: number,
  ) {}

  /**
   * Samples one token per state from `logits` (row r at float offset rowStarts[r], `vocab` floats),
   * records it in its state, and returns ids with logprobs where asked. The buffer needs STORAGE usage.
   */
  async sample(
    logits: GPUBuffer,
    rowStarts: readonly number[],
    states: readonly DeviceSamplerState[],
    /** Per state, a grammar's mask of the tokens allowed now (structured outputs), or undefined. */
    grammarMasks: readonly (Int32Array | undefined)[] = [],
  ): Promise<SampledToken[]> {
    const rows = states.length;
    if (rowStarts.length !== rows) throw new RangeError(`${rowStarts.length} row starts for ${rows} samplers`);
    const k = this.kernels;
    const settings = new Uint8Array(rows * SETTINGS_BYTES);
    const edits: number[] = []; // ids of the {id: u32, value: f32} pairs; values beside them
    const lists = states.map((state, r) => state.next(grammarMasks[r]));
    const values: number[] = [];
    const addEdit = (id: number, value: number): void => {
      edits.push(id);
      values.push(value);
    };
    lists.forEach((list, r) => {
      const u32 = new Uint32Array(list.settings);
      u32[8] = edits.length;
      u32[9] = list.bias.length;
      for (const [id, bias] of list.bias) addEdit(id, bias);
      u32[10] = edits.length;
      u32[11] = list.seen.length;
      for (const id of list.seen) addEdit(id, 0);
      u32[12] = edits.length;
      u32[13] = list.generated.length;
      for (const [id, count] of list.generated) addEdit(id, count);
      if (list.allowedMask) {
        u32[16] = edits.length;
        u32[17] = 1;
        for (const word of list.allowedMask) addEdit(word, 0);
      }
      settings.set(new Uint8Array(list.settings), r * SETTINGS_BYTES);
    });
    const editData = new ArrayBuffer(Math.max(8, edits.length * 8));
    const editIds = new Uint32Array(editData);
    const editValues = new Float32Array(editData);
    edits.forEach((id, j) => {
      editIds[2 * j] = id;
      editValues[2 * j + 1] = values[j];
    });

    const params = new ArrayBuffer(32); // struct Params: vocab, rows, neg_inf, key_bits, half_wg, 3 x pad
    new Uint32Array(params).set([this.vocab, rows, 0, 32, 128]);
    new Float32Array(params, 8, 1)[0] = -Infinity;
    const buffers = [
      k.upload(new Uint8Array(params), BufferUsage.UNIFORM, 'sample params'),
      k.upload(new Uint32Array(rowStarts), STORAGE, 'sample row starts'),
      logits,
      k.upload(settings, STORAGE, 'sample settings'),
      k.upload(new Uint8Array(editData), STORAGE, 'sample edits'),
      this.kernels.device.createBuffer({
        label: 'sample work',
        size: Math.max(16, rows * this.vocab * 4),
        usage: STORAGE,
      }),
      this.kernels.device.createBuffer({ label: 'sample out', size: rows * 8, usage: STORAGE | BufferUsage.COPY_SRC }),
      this.kernels.device.createBuffer({
        label: 'sample top',
        size: rows * MAX_TOP * 8,
        usage: STORAGE | BufferUsage.COPY_SRC,
      }),
    ];
    try {
      k.dispatch('sample', buffers, rows);
      const wantTop = states.some((s) => s.params.logprobs && s.params.topLogprobs > 0);
      const [out, top] = await Promise.all([
        readBuffer(k.device, buffers[6], rows * 8),
        wantTop ? readBuffer(k.device, buffers[7], rows * MAX_TOP * 8) : Promise.resolve(undefined),
      ]);
      return states.map((state, r) => {
        const tokenId = new Uint32Array(out, r * 8, 1)[0];
        state.accept(tokenId);
        const result: SampledToken = { tokenId };
        if (state.params.logprobs) {
          result.logprob = new Float32Array(out, r * 8 + 4, 1)[0];
          result.topLogprobs = [];
          for (let j = 0; j < state.params.topLogprobs && top; j++) {
            const at = (r * MAX_TOP + j) * 8;
            const id = new Uint32Array(top, at, 1)[0];
            if (id !== 0xffffffff)
              result.topLogprobs.push({ tokenId: id, logprob: new Float32Array(top, at + 4, 1)[0] });
          }
        }
        return result;
      });
    } finally {
      for (const b of buffers) if (b !== logits) b.destroy();
    }
  }

  /**
   * Greedy for every row (shaders/greedy.wgsl): argmax, lowest id on ties, and its log-softmax, without
   * penalties or any other processor. For requests with temperature 0 and no penalties or bias.
   */
  async greedy(logits: GPUBuffer, rowStarts: readonly number[]): Promise<{ tokenId: number; logprob: number }[]> {
    const rows = rowStarts.length;
    const k = this.kernels;
    const params = new ArrayBuffer(16);
    new Uint32Array(params, 0, 2).set([this.vocab, rows]);
    new Float32Array(params, 8, 1)[0] = -Infinity;
    const buffers = [
      k.upload(new Uint8Array(params), BufferUsage.UNIFORM, 'greedy params'),
      k.upload(new Uint32Array(rowStarts), STORAGE, 'greedy row starts'),
      logits,
      k.device.createBuffer({
        label: 'greedy out',
        size: Math.max(16, rows * 8),
        usage: STORAGE | BufferUsage.COPY_SRC,
      }),
    ];
    try {
      k.dispatch('greedy', buffers, rows);
      const out = await readBuffer(k.device, buffers[3], rows * 8);
      return rowStarts.map((_, r) => ({
        tokenId: new Uint32Array(out, r * 8, 1)[0],
        logprob: new Float32Array(out, r * 8 + 4, 1)[0],
      }));
    } finally {
      for (const b of buffers) if (b !== logits) b.destroy();
    }
  }
}

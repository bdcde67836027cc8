import { SETTINGS_BYTES, type DeviceSamplerState } from '../../sampling/device-sampler-state.js';
import type { SampledToken } from '../../sampling/sampler.js';
import type { WgslKernels } from './wgsl-kernels.js';
import { readBuffer } from './wgsl-kernels.js';
import { BufferUsage, MAP_MODE_READ } from './usage.js';

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
    const encoder = this.kernels.device.createCommandEncoder({ label: 'sample' });
    const recorded = this.record(encoder, logits, rowStarts, states, grammarMasks);
    this.kernels.device.queue.submit([encoder.finish()]);
    return recorded.read();
  }

  /**
   * The sampling of `sample`, recorded into a caller's encoder (behind the pass that writes the logits, so a
   * step and its draws are one submission): its dispatch and the copies of the drawn ids (and top logprobs)
   * into read-back buffers. `read()` once the caller submitted the encoder.
   */
  record(
    encoder: GPUCommandEncoder,
    logits: GPUBuffer,
    rowStarts: readonly number[],
    states: readonly DeviceSamplerState[],
    grammarMasks: readonly (Int32Array | undefined)[] = [],
  ): { read(): Promise<SampledToken[]> } {
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
    const device = this.kernels.device;
    const buffers = [
      k.upload(new Uint8Array(params), BufferUsage.UNIFORM, 'sample params'),
      k.upload(new Uint32Array(rowStarts), STORAGE, 'sample row starts'),
      logits,
      k.upload(settings, STORAGE, 'sample settings'),
      k.upload(new Uint8Array(editData), STORAGE, 'sample edits'),
      device.createBuffer({ label: 'sample work', size: Math.max(16, rows * this.vocab * 4), usage: STORAGE }),
      device.createBuffer({ label: 'sample out', size: rows * 8, usage: STORAGE | BufferUsage.COPY_SRC }),
      device.createBuffer({ label: 'sample top', size: rows * MAX_TOP * 8, usage: STORAGE | BufferUsage.COPY_SRC }),
    ];
    const wantTop = states.some((s) => s.params.logprobs && s.params.topLogprobs > 0);
    const staging = (size: number): GPUBuffer =>
      device.createBuffer({ label: 'sample read', size, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST });
    const outRead = staging(rows * 8);
    const topRead = wantTop ? staging(rows * MAX_TOP * 8) : undefined;
    k.encode(encoder, 'sample', [{ buffers, x: rows }]);
    encoder.copyBufferToBuffer(buffers[6], 0, outRead, 0, rows * 8);
    if (topRead) encoder.copyBufferToBuffer(buffers[7], 0, topRead, 0, rows * MAX_TOP * 8);
    const mapped = async (b: GPUBuffer): Promise<ArrayBuffer> => {
      await b.mapAsync(MAP_MODE_READ);
      return b.getMappedRange().slice(0);
    };
    return {
      read: async () => {
        try {
          const [out, top] = await Promise.all([mapped(outRead), topRead ? mapped(topRead) : undefined]);
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
          for (const b of [...buffers, outRead, topRead]) if (b && b !== logits) b.destroy();
        }
      },
    };
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

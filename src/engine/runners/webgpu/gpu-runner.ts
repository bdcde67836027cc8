import type { KvDtype, KvShape } from '../../kv/block-pool.js';
import type { ModelConfig } from '../../model/config.js';
import type { DeviceDraw, DeviceSampling, ModelRunner, RunnerStats, StepLogits, StepRow } from '../model-runner.js';
import { describeGraphIo, type GraphIo } from '../ort/graph-io.js';
import { refuseNarrowKv, stepInputs } from '../ort/onnx-runner.js';
import type { EngineRuntime, OrtSession, OrtTensor } from '../../model/runtime.js';
import type { SampledToken } from '../../sampling/sampler.js';
import { DeviceSampler } from './device-sampler.js';
import { GpuKvPool } from './gpu-kv-pool.js';
import type { WgslKernels } from './wgsl-kernels.js';
import { KvTransfer, type KvLayerBuffers, type KvRowPlacement } from './kv-transfer.js';
import { BufferUsage } from './usage.js';

/** Logits left on the device: row r's logits after its token i start at float `start(r, i)` of `buffer`. */
export interface DeviceStepLogits {
  readonly buffer: GPUBuffer;
  start(row: number, index: number): number;
  /** Float offsets of each row's last fed token: what DeviceSampler.sample takes. */
  lastStarts(): number[];
  /** The whole (batch, S, vocab) logits on the CPU. */
  download(): Promise<Float32Array>;
  /** Gives the buffer back to ORT; call once sampling has been submitted. */
  release(): void;
}

export interface GpuRunnerOptions {
  /** Leave the logits on the GPU (session output 'gpu-buffer'); forward() then downloads them, forwardOnDevice() does not. */
  logitsOnDevice?: boolean;
}

/** The graph is one OnnxRunner can run but this runner cannot (fp16 KV, no position_ids). */
export class UnsupportedOnDevice extends Error {}

/**
 * The model runner of the WebGPU backend with the KV cache kept on the device. Same forward() contract
 * and batch layout as OnnxRunner (see its comment), but each pass
 *   1. gathers every layer's past_key_values from the device block pool with our kernel into fresh
 *      device buffers, handed to ORT with Tensor.fromGpuBuffer;
 *   2. runs the session with present.* left on the device (preferredOutputLocation 'gpu-buffer');
 *   3. scatters the new keys and values from ORT's present buffers into their blocks with our kernel.
 * Keys and values never cross to the CPU; only the logits come back (or, with `logitsOnDevice`, not even
 * those: the device sampler reads them where they are).
 *
 * The engine's BlockPool does the bookkeeping (reference counts, prefix hashes, free list); the bytes are
 * the device's (createKvMemory gives them: a GpuKvPool), its copy-on-write copies done at the start of the
 * next pass.
 */
export class GpuRunner implements ModelRunner, DeviceSampling {
  readonly name = 'onnxruntime';
  /** The pool's bytes come from the device's own gather, attention and scatter. */
  readonly kvIdentity = 'device';

  private sampler: DeviceSampler | undefined;
  private kvPool: GpuKvPool | undefined;

  private constructor(
    private readonly runtime: EngineRuntime,
    private readonly session: OrtSession,
    readonly config: ModelConfig,
    private readonly kernels: WgslKernels,
    readonly logitsOnDevice: boolean,
  ) {}

  static async create(
    runtime: EngineRuntime,
    onnx: Uint8Array,
    config: ModelConfig,
    kernels: WgslKernels,
    options: GpuRunnerOptions = {},
  ): Promise<GpuRunner> {
    const logitsOnDevice = options.logitsOnDevice ?? false;
    const preferredOutputLocation: Record<string, 'gpu-buffer' | 'cpu'> = {
      logits: logitsOnDevice ? 'gpu-buffer' : 'cpu',
    };
    for (let layer = 0; layer < config.numLayers; layer++) {
      preferredOutputLocation[`present.${layer}.key`] = 'gpu-buffer';
      preferredOutputLocation[`present.${layer}.value`] = 'gpu-buffer';
    }
    const session = await runtime.InferenceSession.create(onnx, {
      executionProviders: runtime.executionProviders,
      graphOptimizationLevel: 'all',
      preferredOutputLocation,
      logSeverityLevel: 3, // ORT's warning that shape ops run on the CPU is by design
    });
    // Our kernels move float32 KV and the feeds below name position_ids: graphs with fp16 KV I/O or
    // without position_ids (some Hugging Face exports, which OnnxRunner converts) are not handled here yet.
    let io: GraphIo;
    try {
      io = describeGraphIo(runtime, session, config);
    } catch (err) {
      await session.release();
      throw err;
    }
    if (!io.hasPositionIds || io.kvType !== 'float32' || io.logitsType !== 'float32') {
      await session.release();
      throw new UnsupportedOnDevice(
        'GpuRunner needs float32 KV and logits and a position_ids input; use OnnxRunner for this model',
      );
    }
    return new GpuRunner(runtime, session, config, kernels, logitsOnDevice);
  }

  /** Tokens are drawn where the logits are, when the runner keeps them there. */
  get deviceSampling(): DeviceSampling | undefined {
    return this.logitsOnDevice ? this : undefined;
  }

  /** The pool's bytes, on the device. */
  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): GpuKvPool {
    refuseNarrowKv(dtype);
    if (this.kvPool) throw new Error('the KV pool is already allocated');
    this.kvPool = new GpuKvPool(this.kernels.device, shape, numBlocks, blockSize);
    return this.kvPool;
  }

  stats(): RunnerStats {
    return { runner: 'onnxruntime' };
  }

  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    const { logits, S } = await this.run(rows);
    const data = (this.logitsOnDevice ? await logits.getData(true) : logits.data) as Float32Array; // (batch, S, vocab)
    const vocab = this.config.vocabSize;
    const at = (row: number, index: number): Float32Array => {
      const offset = (row * S + S - rows[row].tokens.length + index) * vocab;
      return data.subarray(offset, offset + vocab);
    };
    return { at, last: (row) => at(row, rows[row].tokens.length - 1) };
  }

  /** A pass whose logits stay on the device (needs `logitsOnDevice`), for DeviceSampler. */
  async forwardOnDevice(rows: readonly StepRow[]): Promise<DeviceStepLogits> {
    if (!this.logitsOnDevice) throw new Error('create the runner with logitsOnDevice: true');
    const { logits, S } = await this.run(rows);
    const vocab = this.config.vocabSize;
    const start = (row: number, index: number): number => (row * S + S - rows[row].tokens.length + index) * vocab;
    return {
      buffer: logits.gpuBuffer as GPUBuffer,
      start,
      lastStarts: () => rows.map((r, row) => start(row, r.tokens.length - 1)),
      download: async () => (await logits.getData(false)) as Float32Array,
      release: () => logits.dispose(),
    };
  }

  /**
   * One pass whose sampling happens where the logits are (needs `logitsOnDevice`): draw k samples
   * `states[k]` from row `rows[k]`'s last logits (a row and its forks share one), over the first `vocab`
   * ids. The logits come back to the CPU only when `download` (rows that verify proposals or search beams).
   */
  async forwardAndSample(
    rows: readonly StepRow[],
    draws: readonly DeviceDraw[],
    vocab: number,
    download: boolean,
  ): Promise<{ logits: StepLogits | undefined; sampled: SampledToken[] }> {
    const out = await this.forwardOnDevice(rows);
    try {
      this.sampler ??= new DeviceSampler(this.kernels, vocab);
      const last = out.lastStarts();
      const sampled = draws.length
        ? await this.sampler.sample(
            out.buffer,
            draws.map((d) => last[d.row]),
            draws.map((d) => d.state),
            draws.map((d) => d.grammarMask),
          )
        : [];
      if (!download) return { logits: undefined, sampled };
      const data = await out.download();
      const size = this.config.vocabSize;
      const at = (row: number, index: number): Float32Array =>
        data.subarray(out.start(row, index), out.start(row, index) + size);
      return { logits: { at, last: (row) => at(row, rows[row].tokens.length - 1) }, sampled };
    } finally {
      out.release();
    }
  }

  /** One pass: gather, run, scatter, advance. Returns the logits tensor, (batch, S, vocab). */
  private async run(rows: readonly StepRow[]): Promise<{ logits: OrtTensor; S: number }> {
    const { kvPool } = this;
    if (!kvPool) throw new Error('createKvMemory() before the first pass');
    const { numLayers, numKvHeads, headDim } = this.config;
    const device = this.kernels.device;
    const B = rows.length;
    const P = Math.max(...rows.map((r) => r.kv.length));
    const S = Math.max(...rows.map((r) => r.tokens.length));
    const T = P + S;
    const tables = rows.map(({ kv }) => kv.blocks);
    for (const { kv, tokens } of rows) kv.checkWritable(tokens.length);

    const { inputIds, positionIds, attentionMask } = stepInputs(rows, P, S);
    const Tensor = this.runtime.Tensor;
    const feeds: Record<string, OrtTensor> = {
      input_ids: new Tensor('int64', inputIds, [B, S]),
      attention_mask: new Tensor('int64', attentionMask, [B, T]),
      position_ids: new Tensor('int64', positionIds, [B, S]),
    };

    const transfer = new KvTransfer(this.kernels, kvPool);
    const past: KvLayerBuffers[] = [];
    const pastDims = [B, numKvHeads, P, headDim];
    const encoder = device.createCommandEncoder({ label: 'kv gather' });
    kvPool.encodePendingCopies(encoder);
    if (P > 0) {
      const bytes = B * numKvHeads * P * headDim * 4;
      const usage = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;
      for (let layer = 0; layer < numLayers; layer++) {
        past.push({
          keys: device.createBuffer({ size: bytes, usage }),
          values: device.createBuffer({ size: bytes, usage }),
        });
      }
      const placement: KvRowPlacement[] = rows.map(({ kv }, b) => ({
        blocks: tables[b],
        length: kv.length,
        offset: P - kv.length,
        count: 0,
      }));
      transfer.encodeGather(encoder, placement, P, past);
    }
    device.queue.submit([encoder.finish()]);
    for (let layer = 0; layer < numLayers; layer++) {
      feeds[`past_key_values.${layer}.key`] =
        P > 0
          ? Tensor.fromGpuBuffer(past[layer].keys, { dataType: 'float32', dims: pastDims })
          : new Tensor('float32', new Float32Array(0), pastDims);
      feeds[`past_key_values.${layer}.value`] =
        P > 0
          ? Tensor.fromGpuBuffer(past[layer].values, { dataType: 'float32', dims: pastDims })
          : new Tensor('float32', new Float32Array(0), pastDims);
    }

    let out: Record<string, OrtTensor>;
    try {
      out = await this.session.run(feeds);
    } finally {
      transfer.release();
      for (const { keys, values } of past) {
        keys.destroy();
        values.destroy();
      }
    }

    const present: KvLayerBuffers[] = [];
    for (let layer = 0; layer < numLayers; layer++) {
      present.push({
        keys: out[`present.${layer}.key`].gpuBuffer as GPUBuffer,
        values: out[`present.${layer}.value`].gpuBuffer as GPUBuffer,
      });
    }
    const scatter = device.createCommandEncoder({ label: 'kv scatter' });
    const placement: KvRowPlacement[] = rows.map(({ kv, tokens }, b) => ({
      blocks: tables[b],
      length: kv.length,
      offset: T - tokens.length,
      count: tokens.length,
    }));
    transfer.encodeScatter(scatter, placement, T, present);
    device.queue.submit([scatter.finish()]);
    transfer.release();
    // ORT may reuse these buffers for its next run; that work is queued after the scatter.
    for (let layer = 0; layer < numLayers; layer++) {
      out[`present.${layer}.key`].dispose();
      out[`present.${layer}.value`].dispose();
    }
    for (const { kv, tokens } of rows) kv.advance(tokens.length);
    return { logits: out.logits, S };
  }

  async release(): Promise<void> {
    await this.session.release();
    this.kvPool?.destroy();
  }
}

import type { EngineLimits } from '../../../defaults.js';
import { InvalidRequestError } from '../../../errors.js';
import type { KvDtype, KvShape } from '../../../kv/block-pool.js';
import type { ModelConfig } from '../../../model/config.js';
import type { SampledToken } from '../../../sampling/sampler.js';
import type { DeviceDraw, DeviceSampling, ModelRunner, RunnerStats, StepLogits, StepRow } from '../../model-runner.js';
import { DeviceSampler } from '../device-sampler.js';
import { GpuKvPool } from '../gpu-kv-pool.js';
import { MAP_MODE_READ } from '../usage.js';
import { RunnerAdapters } from './gpu-adapters.js';
import { PassBuffers, type PassCapacity } from './pass-buffers.js';
import { planPass, type PlannedDispatch } from './pass-plan.js';
import { ropeTable, stepInputs, type StepInputs } from './step-inputs.js';
import type { WgslModel } from './wgsl-model.js';

/** The most workgroups along a grid's dimension every device allows (a LoRA kernel's tokens lie along one). */
const MAX_GRID = 65535;

/**
 * The model runner on our own WGSL forward pass (the GPU twin of kernels/: kernel-runner.ts computes the
 * same steps): a whole step is one command buffer holding one compute pass of fixed, pre-bound dispatches
 * (pass-plan.ts), submitted once; only the logits of the positions asked for come back, or with device
 * sampling only the drawn ids. The KV pool lives on the device (GpuKvPool, float32), read and written in
 * place through each row's block table by the attention and KV-write kernels.
 *
 * Batch invariance: every kernel computes a token's values from that token's inputs alone, in a fixed
 * order (no reduction spans tokens), so a row's logits are the same bits alone or in any batch.
 *
 * LoRA: each row may run with an adapter of its own (its sequence's `kv.variant`); each adapter's update of a
 * product is recorded just before it, over that adapter's tokens (gpu-adapters.ts, wgsl-lora.ts), and the
 * product adds it to those tokens only: a base row's logits are the same bits beside adapter rows.
 */
export class WgslRunner implements ModelRunner, DeviceSampling {
  readonly name = 'wgsl';
  /** The pool's bytes are what this pass wrote: not the kernels' (other float order), nor onnxruntime's. */
  readonly kvIdentity = 'wgsl';
  readonly noPromptLogprobs = 'the WGSL pass computes logits only for the positions a pass asks for';
  readonly rowAdapters = true;
  readonly config: ModelConfig;
  private readonly adapters: RunnerAdapters;

  private kv: GpuKvPool | undefined;
  private buffers: PassBuffers | undefined;
  private plan: { dispatches: PlannedDispatch[]; uniforms: GPUBuffer } | undefined;
  private sampler: DeviceSampler | undefined;
  private released = false;
  /** Dispatches recorded into the last step's compute pass. */
  lastDispatches = 0;

  constructor(
    private readonly model: WgslModel,
    private readonly limits: EngineLimits,
  ) {
    this.config = model.config;
    this.adapters = new RunnerAdapters(model.device, model.adapters, model.pipelines, model.config.numLayers);
  }

  get deviceSampling(): DeviceSampling | undefined {
    return this.model.sampling ? this : undefined;
  }

  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): GpuKvPool {
    if (dtype === 'int8')
      throw new InvalidRequestError(
        'KV_DTYPE',
        'an int8 KV cache needs the edge kernels (backend wasm or kernels); the WGSL pass keeps float32 or float16',
        'unsupported_model',
      );
    if (this.kv) throw new Error('the KV pool is already allocated');
    this.kv = new GpuKvPool(this.model.device, shape, numBlocks, blockSize, dtype);
    return this.kv;
  }

  stats(): RunnerStats {
    return { runner: 'wgsl' };
  }

  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    const { inputs } = this.run(rows, true);
    const data = await this.download(inputs);
    return this.stepLogits(inputs, data);
  }

  /** One step and its draws in one submission: the sampling dispatch follows the pass in its command buffer. */
  async forwardAndSample(
    rows: readonly StepRow[],
    draws: readonly DeviceDraw[],
    vocab: number,
    download: boolean,
  ): Promise<{ logits: StepLogits | undefined; sampled: SampledToken[] }> {
    const sampling = this.model.sampling;
    if (!sampling) throw new Error('this runner was made without the sampling kernels');
    this.sampler ??= new DeviceSampler(sampling, vocab);
    const sampler = this.sampler;
    let drawn: { read(): Promise<SampledToken[]> } | undefined;
    const { inputs } = this.run(rows, download, (encoder, buffers, step) => {
      if (draws.length)
        drawn = sampler.record(
          encoder,
          buffers.logits,
          draws.map((d) => (step.logitStart[d.row] + step.want[d.row] - 1) * vocab),
          draws.map((d) => d.state),
          draws.map((d) => d.grammarMask),
        );
    });
    const [sampled, data] = await Promise.all([
      drawn ? drawn.read() : [],
      download ? this.download(inputs) : undefined,
    ]);
    return { logits: data && this.stepLogits(inputs, data), sampled };
  }

  /**
   * Lays out, records and submits one step (with the logits' copy for read-back when `copyOut`, and whatever
   * `after` records behind the pass); advances the rows.
   */
  private run(
    rows: readonly StepRow[],
    copyOut: boolean,
    after?: (encoder: GPUCommandEncoder, buffers: PassBuffers, inputs: StepInputs) => void,
  ): { inputs: StepInputs; buffers: PassBuffers } {
    if (this.released) throw new Error('this runner was released');
    const kv = this.kv;
    if (!kv) throw new Error('createKvMemory() before the first pass');
    for (const { kv: seq, tokens } of rows) seq.checkWritable(tokens.length);
    const { config } = this;
    const inputs = stepInputs(rows, config.vocabSize);
    const lora = this.adapters.pass(
      rows.map((r) => r.kv.variant),
      inputs.counts,
    );
    if (lora && inputs.tokens > MAX_GRID)
      throw new RangeError(`a pass with adapter rows feeds at most ${MAX_GRID} tokens, not ${inputs.tokens}`);
    const b = this.ensure(inputs, lora !== undefined);
    const q = this.model.device.queue;
    const w = this.model.weights;
    q.writeBuffer(b.step, 0, new Uint32Array([inputs.tokens, inputs.logitRows, lora?.adapters.length ?? 0, 0]));
    if (lora) q.writeBuffer(b.lora!.index, 0, lora.index);
    q.writeBuffer(b.tok, 0, inputs.tok);
    q.writeBuffer(b.tables, 0, inputs.tables);
    if (inputs.logitRows) q.writeBuffer(b.rowmap, 0, inputs.rowmap);
    const global = ropeTable(inputs, w.invFreq);
    q.writeBuffer(b.rope, 0, global);
    if (w.localInvFreq) q.writeBuffer(b.ropeLocal, 0, ropeTable(inputs, w.localInvFreq));
    else if (config.slidingWindow) q.writeBuffer(b.ropeLocal, 0, global);
    const encoder = this.model.device.createCommandEncoder({ label: 'wgsl step' });
    kv.encodePendingCopies(encoder);
    const pass = encoder.beginComputePass({ label: 'wgsl step' });
    let pipeline: GPUComputePipeline | undefined;
    const { dispatches } = this.plan!;
    for (const d of dispatches) {
      if (lora && d.lora)
        for (const u of this.adapters.before(d, lora.adapters, dispatches, b.lora!, b.step)) {
          pass.setPipeline(u.pipeline);
          pipeline = u.pipeline;
          pass.setBindGroup(0, u.bindGroup);
          const [x, y, z] = u.grid(inputs.tokens);
          pass.dispatchWorkgroups(x, y, z);
        }
      if (d.pipeline !== pipeline) {
        pipeline = d.pipeline;
        pass.setPipeline(pipeline);
      }
      pass.setBindGroup(0, d.bindGroup);
      const [x, y, z] = d.grid(inputs.tokens, inputs.logitRows);
      pass.dispatchWorkgroups(x, y, z);
    }
    pass.end();
    this.lastDispatches = dispatches.length;
    after?.(encoder, b, inputs);
    if (copyOut) encoder.copyBufferToBuffer(b.logits, 0, b.readback, 0, this.logitBytes(inputs));
    q.submit([encoder.finish()]);
    for (const { kv: seq, tokens } of rows) seq.advance(tokens.length);
    return { inputs, buffers: b };
  }

  private logitBytes(inputs: StepInputs): number {
    return Math.max(4, inputs.logitRows * this.config.vocabSize * 4);
  }

  private async download(inputs: StepInputs): Promise<Float32Array> {
    const b = this.buffers!;
    const bytes = this.logitBytes(inputs);
    await b.readback.mapAsync(MAP_MODE_READ, 0, Math.ceil(bytes / 16) * 16);
    try {
      return new Float32Array(b.readback.getMappedRange(0, Math.ceil(bytes / 16) * 16).slice(0, bytes));
    } finally {
      b.readback.unmap();
    }
  }

  private stepLogits(inputs: StepInputs, data: Float32Array): StepLogits {
    const V = this.config.vocabSize;
    const slot = (s: number): Float32Array => data.subarray(s * V, (s + 1) * V);
    const { counts, want, logitStart } = inputs;
    return {
      last: (row) => slot(logitStart[row] + want[row] - 1),
      at: (row, index) => {
        const fromEnd = counts[row] - 1 - index;
        if (fromEnd < 0 || fromEnd >= want[row])
          throw new RangeError(`${this.noPromptLogprobs}: position ${index} of row ${row} was not asked for`);
        return slot(logitStart[row] + want[row] - 1 - fromEnd);
      },
    };
  }

  /** Pass buffers that hold this step (made anew, larger, with the plan's bind groups, when they do not). */
  private ensure(inputs: StepInputs, lora: boolean): PassBuffers {
    const need: PassCapacity = {
      tokens: inputs.tokens,
      logitRows: inputs.logitRows,
      tableEntries: inputs.tableEntries,
      lora,
    };
    if (this.buffers?.holds(need)) return this.buffers;
    const old = this.buffers?.capacity;
    const grow = (n: number, was = 0, floor = 1): number => Math.max(n, 2 * was, floor);
    const capacity = {
      tokens: grow(need.tokens, old?.tokens, Math.min(this.limits.maxTokensPerStep, 64)),
      logitRows: grow(need.logitRows, old?.logitRows, Math.min(this.limits.maxBatchSize, 16)),
      tableEntries: grow(need.tableEntries, old?.tableEntries, 256),
      // Once a runner has served an adapter it keeps LoRA's buffers (binding them anew remakes the plan).
      lora: lora || old?.lora === true,
    };
    this.buffers?.destroy();
    this.plan?.uniforms.destroy();
    const { model } = this;
    this.buffers = new PassBuffers(model.device, this.config, model.weights.intermediateSize, capacity);
    this.plan = planPass(model.device, this.config, model.weights, model.pipelines, this.buffers, this.kv!);
    return this.buffers;
  }

  release(): Promise<void> {
    this.released = true;
    this.buffers?.destroy();
    this.plan?.uniforms.destroy();
    this.kv?.destroy();
    this.buffers = undefined;
    this.plan = undefined;
    return Promise.resolve();
  }
}

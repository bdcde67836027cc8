import type { KvArray, KvDtype, KvShape, KvStorage } from '../kv/block-pool.js';
import type { ModelConfig } from '../model/config.js';
import type { ModelRunner, RunnerStats, StepLogits, StepRow } from '../runners/model-runner.js';
import type { KernelExports } from './edge-kernels.js';
import type { KernelModel } from './kernel-model.js';
import { align, type LinearMemory } from './linear-memory.js';
import { CHUNK, LOGIT_ROWS, passLayout, type PassLayout } from './scratch-layout.js';
import type { LlamaWeights } from './weights/llama-weights.js';
import type { Matrix } from './weights/matrix.js';

/** Pointers of one pass's scratch buffers (scratch-layout.ts has their shapes). */
type Scratch = { [K in keyof PassLayout]: number };

/**
 * The model runner on our own WebAssembly kernels (kernels/*.c): the whole Llama forward pass over
 * weights held once, in their stored format, in the kernels' linear memory, with the KV block pool in
 * that same memory. Attention reads each sequence's past straight from its blocks through its block
 * table and writes the new tokens' keys and values into their blocks in place: nothing is gathered.
 *
 * A pass lays every row's new tokens end to end (M tokens) and runs each layer over them CHUNK tokens
 * at a time; the residual stream of all M stays in scratch. Logits are computed for each row's last
 * token only, batched; any other position's logits (speculative verification) on demand.
 *
 * Batch invariance: every kernel computes an element with the same float operations whatever the
 * tile, the chunk or the batch (kernels/kernels.h), and activations are quantised per block of their
 * own row. So a sequence's logits are bit-identical alone or in any batch, and whether its past came
 * from the prefix cache or from its own prefill.
 */
export class KernelRunner implements ModelRunner {
  readonly name = 'kernels';
  readonly kvIdentity = 'kernels';
  readonly deviceSampling = undefined;

  readonly config: ModelConfig;
  readonly memory: LinearMemory;
  readonly weights: LlamaWeights;
  private readonly kernels: KernelExports;
  /** This engine's KV pool: one region of the shared memory (every layer's keys, then every layer's values). */
  private pool: { region: number; stopRemaking: () => void } | undefined;
  private kvKeys: number[] = [];
  private kvValues: number[] = [];
  private blockSize = 0;
  private kvHalf = false;
  /** Set once released (or its pool taken back by the isolate): a later pass would write bytes it no longer owns. */
  private released = false;
  /** This pass's scratch, laid out anew each pass in the model's shared arena. */
  private scratch!: Scratch;
  private quantMemo: { x: number; rows: number; blocks: number } | undefined;
  /** The last pass's residual stream (M, hidden), each row's token offsets in it, and its arena epoch. */
  private last: { residual: number; firstToken: number[]; epoch: number } | undefined;

  /** A runner over `model`'s shared weights (KernelModel.runner). */
  constructor(private readonly model: KernelModel) {
    this.config = model.config;
    this.memory = model.memory;
    this.weights = model.weights;
    this.kernels = model.kernels;
  }

  stats(): RunnerStats {
    return { runner: 'kernels', wasmMemoryBytes: this.memory.bytes };
  }

  /** The KV pool lives in linear memory (createKvStorage); nothing mirrors it. */
  attachPool(): void {}

  /** Bytes of linear memory now (weights + every KV pool + scratch + the kernels' own stack and data). */
  get memoryBytes(): number {
    return this.memory.bytes;
  }

  /**
   * Places the engine's KV block pool in linear memory: per layer, keys and values (numBlocks, kv_heads,
   * blockSize, head_dim) float32 or float16, the layout BlockPool describes. Returns the views BlockPool holds.
   */
  createKvStorage(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): KvStorage {
    if (this.pool) throw new Error('the KV pool is already allocated');
    const elements = numBlocks * shape.numKvHeads * blockSize * shape.headDim;
    const bytes = dtype === 'fp16' ? 2 : 4;
    const region = this.memory.alloc(2 * shape.numLayers * elements * bytes);
    for (let layer = 0; layer < shape.numLayers; layer++) {
      this.kvKeys.push(region + layer * elements * bytes);
      this.kvValues.push(region + (shape.numLayers + layer) * elements * bytes);
    }
    this.blockSize = blockSize;
    this.kvHalf = dtype === 'fp16';
    const storage: KvStorage = { keys: [], values: [] };
    const view = (ptr: number): KvArray =>
      this.kvHalf ? new Uint16Array(this.memory.memory.buffer, ptr, elements) : this.memory.f32(ptr, elements);
    const remake = (): void => {
      for (let layer = 0; layer < shape.numLayers; layer++) {
        storage.keys[layer] = view(this.kvKeys[layer]);
        storage.values[layer] = view(this.kvValues[layer]);
      }
    };
    remake();
    this.pool = { region, stopRemaking: this.memory.onGrow(remake) };
    return storage;
  }

  /**
   * Synchronous: the pass runs start to end without yielding, and its logits live in the shared scratch
   * until the next pass over this model's memory (any engine's), so the engine reads them before it yields.
   */
  forward(rows: readonly StepRow[]): StepLogits {
    if (this.released) throw new Error('this runner was released: its KV pool is no longer its own');
    if (!this.pool) throw new Error('createKvStorage() before the first pass');
    const { hiddenSize: H, headDim, vocabSize, numLayers, numHeads, numKvHeads } = this.config;
    const k = this.kernels;
    const kvs = rows.map(({ kv }) => kv);
    const counts = rows.map((r) => r.tokens.length);
    const starts = kvs.map((kv) => kv.length);
    for (const [r, kv] of kvs.entries()) kv.checkWritable(counts[r]);
    const { offsets: firstToken, total: M } = packedOffsets(counts);
    const { offsets: tableStart, total: tableEntries } = packedOffsets(kvs.map((kv) => kv.blocks.length));
    // Logits for each row's last positions (its last token, or a verification's proposals and the token after
    // them), in one batched output projection; past LOGIT_ROWS more than one per row, the rest are lazy.
    const want = rows.map((r, i) => Math.min(counts[i], Math.max(1, r.logits ?? 1)));
    let extra = LOGIT_ROWS;
    for (const [i, w] of want.entries()) {
      want[i] = 1 + Math.min(w - 1, extra);
      extra -= want[i] - 1;
    }
    const { offsets: logitStart, total: logitRows } = packedOffsets(want);

    // Scratch for this pass, from the shared arena: whatever the last pass (of any engine) left there is gone.
    const epoch = this.model.arena.begin();
    this.quantMemo = undefined;
    const mem = this.memory;
    const scoreRow = Math.max(...kvs.map((_kv, r) => Math.min(CHUNK, counts[r]) * (starts[r] + counts[r] + 8)));
    const sizes = passLayout(this.config, { tokens: M, tableEntries, scoreRow, logitRows }, this.weights);
    const scratch = {} as Scratch;
    for (const name of Object.keys(sizes) as (keyof Scratch)[]) scratch[name] = this.model.arena.alloc(sizes[name]);
    this.scratch = scratch;
    const s = scratch;
    const { residual, cos, sin, tables, logits, lastRows } = s;

    // Inputs: embeddings, RoPE tables, block tables. Views are made after every alloc (none grows later).
    const ids: number[] = rows.flatMap((r) => r.tokens);
    for (const [t, id] of ids.entries()) this.embed(residual + t * H * 4, id);
    const cosView = mem.f32(cos, M * (headDim / 2));
    const sinView = mem.f32(sin, M * (headDim / 2));
    const { invFreq } = this.weights;
    rows.forEach((row, r) => {
      for (let i = 0; i < row.tokens.length; i++) {
        const pos = starts[r] + i;
        const at = (firstToken[r] + i) * (headDim / 2);
        // float64 angles, rounded once: the float32 graph's pos * inv_freq rounds before the cosine.
        for (let j = 0; j < headDim / 2; j++) {
          cosView[at + j] = Math.cos(pos * invFreq[j]);
          sinView[at + j] = Math.sin(pos * invFreq[j]);
        }
      }
    });
    for (const [r, kv] of kvs.entries()) mem.i32(tables + tableStart[r] * 4, kv.blocks.length).set(kv.blocks);

    const qOut = numHeads * headDim;
    const kvOut = numKvHeads * headDim;
    const I = this.weights.intermediateSize;
    const rowOf = rows.flatMap((row, r) => row.tokens.map(() => r));
    const scale = 1 / Math.sqrt(headDim);
    for (let layer = 0; layer < numLayers; layer++) {
      const w = this.weights.layers[layer];
      for (let c0 = 0; c0 < M; c0 += CHUNK) {
        const n = Math.min(CHUNK, M - c0);
        const x = residual + c0 * H * 4;
        k.rmsnorm(s.h, x, w.attnNorm, n, H, this.config.rmsNormEps);
        this.quantMemo = undefined;
        this.linear(s.q, s.h, n, w.q);
        this.linear(s.k, s.h, n, w.k);
        this.linear(s.v, s.h, n, w.v);
        k.rope(s.q, cos + c0 * (headDim / 2) * 4, sin + c0 * (headDim / 2) * 4, n, numHeads, headDim, qOut);
        k.rope(s.k, cos + c0 * (headDim / 2) * 4, sin + c0 * (headDim / 2) * 4, n, numKvHeads, headDim, kvOut);
        // Each run of one row's tokens inside the chunk: store its keys and values, then attend.
        for (let t = c0; t < c0 + n; ) {
          const r = rowOf[t];
          const run = Math.min(c0 + n, firstToken[r] + counts[r]) - t;
          const start = starts[r] + (t - firstToken[r]);
          const table = tables + tableStart[r] * 4;
          const local = t - c0;
          const write = this.kvHalf ? k.kv_write_f16 : k.kv_write;
          write(
            this.kvKeys[layer],
            this.kvValues[layer],
            table,
            start,
            run,
            s.k + local * kvOut * 4,
            s.v + local * kvOut * 4,
            numKvHeads,
            headDim,
            this.blockSize,
          );
          k.attention(
            s.ctx + local * qOut * 4,
            s.q + local * qOut * 4,
            this.kvKeys[layer],
            this.kvValues[layer],
            table,
            start,
            run,
            numHeads,
            numKvHeads,
            headDim,
            this.blockSize,
            scale,
            s.scores,
            this.kvHalf ? 1 : 0,
          );
          t += run;
        }
        this.quantMemo = undefined;
        this.linear(s.out, s.ctx, n, w.o);
        k.add_inplace(x, s.out, n * H);
        k.rmsnorm(s.h, x, w.mlpNorm, n, H, this.config.rmsNormEps);
        this.quantMemo = undefined;
        this.linear(s.gate, s.h, n, w.gate);
        this.linear(s.up, s.h, n, w.up);
        k.silu_mul(s.gate, s.up, align(n * I, 4));
        this.quantMemo = undefined;
        this.linear(s.out, s.gate, n, w.down);
        k.add_inplace(x, s.out, n * H);
      }
    }
    for (const [r, kv] of kvs.entries()) kv.advance(counts[r]);

    const all = mem.u8(0, mem.bytes);
    for (const [r, n] of want.entries()) {
      const from = residual + (firstToken[r] + counts[r] - n) * H * 4;
      all.copyWithin(lastRows + logitStart[r] * H * 4, from, from + n * H * 4);
    }
    for (let r0 = 0; r0 < logitRows; r0 += CHUNK) {
      const n = Math.min(CHUNK, logitRows - r0);
      k.rmsnorm(s.h, lastRows + r0 * H * 4, this.weights.norm, n, H, this.config.rmsNormEps);
      this.quantMemo = undefined;
      this.linear(logits + r0 * vocabSize * 4, s.h, n, this.weights.lmHead);
    }
    this.last = { residual, firstToken, epoch };
    const view = (slot: number): Float32Array => {
      this.checkCurrent(epoch);
      return mem.f32(logits + slot * vocabSize * 4, vocabSize);
    };
    return {
      last: (row) => view(logitStart[row] + want[row] - 1),
      at: (row, index) => {
        const fromEnd = counts[row] - 1 - index;
        return fromEnd < want[row]
          ? view(logitStart[row] + want[row] - 1 - fromEnd)
          : this.logitsAt(firstToken[row] + index);
      },
    };
  }

  /** A pass's logits are read before another pass over the shared scratch; anything else is a bug to say aloud. */
  private checkCurrent(epoch: number): void {
    if (!this.model.arena.current(epoch))
      throw new Error('kernel logits read after another pass reused the scratch (read them before yielding)');
  }

  /** Logits after token `t` of the last pass (copied out: the next call reuses the buffer). */
  private logitsAt(t: number): Float32Array {
    const { hiddenSize: H, vocabSize } = this.config;
    this.checkCurrent(this.last!.epoch);
    const s = this.scratch;
    this.kernels.rmsnorm(s.h, this.last!.residual + t * H * 4, this.weights.norm, 1, H, this.config.rmsNormEps);
    this.quantMemo = undefined;
    this.linear(s.lazyLogits, s.h, 1, this.weights.lmHead);
    return this.memory.f32(s.lazyLogits, vocabSize).slice();
  }

  private embed(out: number, id: number): void {
    const { hiddenSize: H, vocabSize } = this.config;
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize)
      throw new RangeError(`token id ${id} is outside the vocabulary (${vocabSize})`);
    const e = this.weights.embedding;
    if (e.kind === 'quant') this.kernels.dequantize_column(out, e.header, id, e.blocks);
    else if (e.dtype === 'f16') this.kernels.embed_f16(out, e.ptr, id, H);
    else if (e.dtype === 'bf16') this.kernels.embed_bf16(out, e.ptr, id, H);
    else this.memory.u8(0, this.memory.bytes).copyWithin(out, e.ptr + id * H * 4, e.ptr + (id + 1) * H * 4);
  }

  /** out (rows, w.n) = x (rows, w.k) @ w, in w's stored format. */
  private linear(out: number, x: number, rows: number, w: Matrix): void {
    const k = this.kernels;
    if (w.kind === 'dense') {
      const kernel =
        w.layout === 'kn'
          ? w.dtype === 'f32'
            ? k.matmul_kn_f32
            : w.dtype === 'f16'
              ? k.matmul_kn_f16
              : undefined
          : w.dtype === 'f32'
            ? k.matmul_nk_f32
            : w.dtype === 'f16'
              ? k.matmul_nk_f16
              : k.matmul_nk_bf16;
      if (!kernel) throw new Error('a bfloat16 (K, N) matrix has no kernel');
      kernel(out, x, w.ptr, rows, w.k, w.n);
      return;
    }
    const s = this.scratch;
    const memo = this.quantMemo;
    // q, k and v (and gate and up) read one input: it is quantised once for them.
    if (!memo || memo.x !== x || memo.rows !== rows || memo.blocks !== w.blocks) {
      k.quantize_rows(s.xq, s.xs, s.xsum, x, rows, w.k, w.blocks);
      this.quantMemo = { x, rows, blocks: w.blocks };
    }
    k.matmul_q(out, s.xq, s.xs, s.xsum, w.header, rows, w.blocks, w.n);
  }

  /**
   * Gives the KV pool's bytes back to the shared memory, at once (the isolate takes a pool back from an
   * object that went away this way); the weights stay for the other runners. Later passes are refused.
   */
  release(): Promise<void> {
    this.last = undefined;
    if (!this.released && this.pool) {
      this.pool.stopRemaking();
      this.memory.free(this.pool.region);
    }
    this.released = true;
    return Promise.resolve();
  }
}

/** Where each of `sizes` starts when they are laid end to end, and the length of them all. */
function packedOffsets(sizes: readonly number[]): { offsets: number[]; total: number } {
  const offsets: number[] = [];
  let total = 0;
  for (const n of sizes) {
    offsets.push(total);
    total += n;
  }
  return { offsets, total };
}

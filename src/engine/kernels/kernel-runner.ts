import type { EngineLimits } from '../defaults.js';
import type { KvArray, KvDtype, KvShape, KvStorage } from '../kv/block-pool.js';
import type { ModelConfig } from '../model/config.js';
import type { ByteStream } from '../model/model-files.js';
import type { MemoryBudget } from '../runners/memory-budget.js';
import type { ModelRunner, RunnerStats, StepLogits, StepRow } from '../runners/model-runner.js';
import { align, instantiateKernels, type KernelExports, type LinearMemory } from './edge-kernels.js';
import { loadGgufWeights } from './gguf/gguf-weights.js';
import { loadOnnxWeights } from './onnx/onnx-weights.js';
import type { LlamaWeights } from './weights/llama-weights.js';
import type { Matrix } from './weights/matrix.js';

/** Tokens whose activations are in scratch at once: bounds scratch memory whatever the pass's size. */
const CHUNK = 32;
/** Logit rows computed in a pass beyond one per row (speculative verifications): bounds the logits' scratch. */
const LOGIT_ROWS = 32;

/** Pointers of one chunk's activations (float32 unless noted), sized for CHUNK rows. */
interface Scratch {
  h: number; // (CHUNK, hidden): normed input of attention / MLP
  q: number; // (CHUNK, heads * head_dim)
  k: number; // (CHUNK, kv_heads * head_dim)
  v: number; // (CHUNK, kv_heads * head_dim)
  ctx: number; // (CHUNK, heads * head_dim)
  out: number; // (CHUNK, hidden): o_proj and down_proj outputs
  gate: number; // (CHUNK, intermediate)
  up: number; // (CHUNK, intermediate)
  xq: number; // (CHUNK, widest input padded to 32) int8 or int16 (by build): quantised activations
  xs: number; // (CHUNK, widest input / 32): their block scales
  xsum: number; // (CHUNK, widest input / 32, 2) int32: their half-block sums
  scores: number; // (CHUNK, heads / kv_heads, longest row + 8): the attention scores of one row's run of tokens
  lazyLogits: number; // (vocab): logits asked for one position at a time
}

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

  private kvKeys: number[] = [];
  private kvValues: number[] = [];
  private blockSize = 0;
  private kvHalf = false;
  private scratchBase = 0;
  /** This pass's scratch; past the KV pool, laid out anew each pass. */
  private scratch!: Scratch;
  private quantMemo: { x: number; rows: number; blocks: number } | undefined;
  /** The last pass's residual stream (M, hidden) and each row's token offsets in it, for lazy logits. */
  private last: { residual: number; firstToken: number[] } | undefined;

  private constructor(
    readonly config: ModelConfig,
    private readonly kernels: KernelExports,
    readonly memory: LinearMemory,
    readonly weights: LlamaWeights,
  ) {}

  /**
   * Streams a weights file into a fresh linear memory, each tensor placed where the kernels will read it
   * (converted on the way where the file's layout is not theirs): the file is never held whole, so loading
   * peaks at the weights plus one tensor's staging. The budget is checked as the weights are placed (and on a
   * GGUF file's size first).
   */
  static async fromStream(
    module: WebAssembly.Module,
    file: ByteStream,
    config: ModelConfig,
    { limits, budget, format = 'onnx' }: { limits: EngineLimits; budget: MemoryBudget; format?: 'onnx' | 'gguf' },
  ): Promise<KernelRunner> {
    const scratch = scratchBytes(config, limits.maxTokensPerStep, limits.maxBatchSize);
    // A GGUF file's blocks are held as they lie, so a file of known size is judged whole before anything is
    // placed; an ONNX file may hold float tables the kernels quantise, so it is judged as its weights arrive.
    if (format === 'gguf' && file.size !== undefined)
      budget.check([
        { label: 'weights', bytes: file.size },
        { label: 'scratch', bytes: scratch },
      ]);
    const { kernels, memory } = await instantiateKernels(module);
    const check = (placed: number): void =>
      budget.check([
        { label: 'weights (so far)', bytes: placed },
        { label: 'scratch', bytes: scratch },
      ]);
    const ctx = { memory, kernels, report: (message: string) => console.warn(`edge kernels: ${message}`) };
    const load = format === 'gguf' ? loadGgufWeights : loadOnnxWeights;
    const weights = await load(file.chunks, config, ctx, check);
    return new KernelRunner(config, kernels, memory, weights);
  }

  stats(): RunnerStats {
    return { runner: 'kernels', wasmMemoryBytes: this.memory.bytes };
  }

  /** The KV pool lives in linear memory (createKvStorage); nothing mirrors it. */
  attachPool(): void {}

  /** Bytes of linear memory now (weights + KV pool + scratch + the kernels' own stack and data). */
  get memoryBytes(): number {
    return this.memory.bytes;
  }

  /**
   * Places the engine's KV block pool in linear memory: per layer, keys and values (numBlocks, kv_heads,
   * blockSize, head_dim) float32 or float16, the layout BlockPool describes. Returns the views BlockPool holds.
   */
  createKvStorage(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): KvStorage {
    if (this.kvKeys.length) throw new Error('the KV pool is already allocated');
    const elements = numBlocks * shape.numKvHeads * blockSize * shape.headDim;
    const bytes = dtype === 'fp16' ? 2 : 4;
    for (let layer = 0; layer < shape.numLayers; layer++) {
      this.kvKeys.push(this.memory.alloc(elements * bytes));
      this.kvValues.push(this.memory.alloc(elements * bytes));
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
    this.memory.onGrow(remake);
    this.scratchBase = this.memory.used;
    return storage;
  }

  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    if (!this.kvKeys.length) throw new Error('createKvStorage() before the first pass');
    const { hiddenSize: H, numHeads, numKvHeads, headDim, vocabSize, numLayers } = this.config;
    const k = this.kernels;
    const kvs = rows.map(({ kv }) => kv);
    const counts = rows.map((r) => r.tokens.length);
    const starts = kvs.map((kv) => kv.length);
    for (const [r, kv] of kvs.entries()) kv.checkWritable(counts[r]);
    const { offsets: firstToken, total: M } = packedOffsets(counts);

    // Scratch for this pass: everything past the KV pool is reused from pass to pass.
    this.memory.resetTo(this.scratchBase);
    this.quantMemo = undefined;
    const mem = this.memory;
    const residual = mem.alloc(M * H * 4); // (M, hidden)
    const cos = mem.alloc(M * (headDim / 2) * 4); // (M, head_dim / 2)
    const sin = mem.alloc(M * (headDim / 2) * 4);
    const { offsets: tableStart, total: tableEntries } = packedOffsets(kvs.map((kv) => kv.blocks.length));
    const tables = mem.alloc(4 * tableEntries);
    const longest = Math.max(...kvs.map((_kv, r) => Math.min(CHUNK, counts[r]) * (starts[r] + counts[r] + 8)));
    this.scratch = this.allocScratch(longest);
    const s = this.scratch;
    // Logits for each row's last positions (its last token, or a verification's proposals and the token after
    // them), in one batched output projection; past LOGIT_ROWS more than one per row, the rest are lazy.
    const want = rows.map((r, i) => Math.min(counts[i], Math.max(1, r.logits ?? 1)));
    let extra = LOGIT_ROWS;
    for (const [i, w] of want.entries()) {
      want[i] = 1 + Math.min(w - 1, extra);
      extra -= want[i] - 1;
    }
    const { offsets: logitStart, total: logitRows } = packedOffsets(want);
    const logits = mem.alloc(logitRows * vocabSize * 4); // (logit rows, vocab)
    const lastRows = mem.alloc(logitRows * H * 4); // (logit rows, hidden)

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
    this.last = { residual, firstToken };
    const view = (slot: number): Float32Array => mem.f32(logits + slot * vocabSize * 4, vocabSize);
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

  /** Logits after token `t` of the last pass (copied out: the next call reuses the buffer). */
  private logitsAt(t: number): Float32Array {
    const { hiddenSize: H, vocabSize } = this.config;
    const s = this.scratch;
    this.kernels.rmsnorm(s.h, this.last!.residual + t * H * 4, this.weights.norm, 1, H, this.config.rmsNormEps);
    this.quantMemo = undefined;
    this.linear(s.lazyLogits, s.h, 1, this.weights.lmHead);
    return this.memory.f32(s.lazyLogits, vocabSize).slice();
  }

  /** `scoreRow`: the most (tokens x keys) one attention call of this pass scores, per head of a KV group. */
  private allocScratch(scoreRow: number): Scratch {
    const { hiddenSize: H, numHeads, numKvHeads, headDim, vocabSize } = this.config;
    const I = this.weights.intermediateSize;
    const f = (n: number): number => this.memory.alloc(align(n, 4) * 4);
    // The widest quantised input, padded to whole blocks (a block of 128 pads K = 64 to 128).
    const widest = Math.max(align(Math.max(H, I, numHeads * headDim), 32), ...this.quantInputs());
    return {
      h: f(CHUNK * H),
      q: f(CHUNK * numHeads * headDim),
      k: f(CHUNK * numKvHeads * headDim),
      v: f(CHUNK * numKvHeads * headDim),
      ctx: f(CHUNK * numHeads * headDim),
      out: f(CHUNK * H),
      gate: f(CHUNK * I),
      up: f(CHUNK * I),
      xq: this.memory.alloc(CHUNK * widest * 2),
      xs: f((CHUNK * widest) / 32),
      xsum: f((CHUNK * widest) / 16),
      scores: f((numHeads / numKvHeads) * scoreRow),
      lazyLogits: f(vocabSize),
    };
  }

  /** K of every quantised matrix, padded to its blocks. */
  private quantInputs(): number[] {
    const w = this.weights;
    const all = [w.lmHead, ...w.layers.flatMap((l) => [l.q, l.k, l.v, l.o, l.gate, l.up, l.down])];
    return all.map((m) => (m.kind === 'quant' ? m.blocks * 32 : 0));
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

  async release(): Promise<void> {
    this.last = undefined;
  }
}

/**
 * Scratch a pass of `tokens` tokens over `rows` rows needs at most (forward()'s allocations), plus the
 * kernels' 64 KiB stack: what the footprint adds to weights and KV pool.
 */
export function scratchBytes(config: ModelConfig, tokens: number, rows: number): number {
  const { hiddenSize: H, numHeads, numKvHeads, headDim, vocabSize, maxPositionEmbeddings } = config;
  const I = 4 * H; // an upper bound for Llama shapes until the weights say (SmolLM2: 1536 = 2.7 H)
  const widest = Math.max(I, numHeads * headDim);
  const perToken = H + headDim + 16; // residual, RoPE tables, a block-table entry
  const chunk = CHUNK * (2 * H + 2 * numHeads * headDim + 2 * numKvHeads * headDim + 2 * I + widest / 2 + widest / 32);
  const scores = CHUNK * (numHeads / numKvHeads) * (maxPositionEmbeddings + 8);
  return 4 * (tokens * perToken + chunk + scores + vocabSize + (rows + LOGIT_ROWS) * (vocabSize + H)) + 65536;
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

import type { EngineLimits } from '../../defaults.js';
import type { KvShape } from '../../kv/block-pool.js';
import { kvRowBytes, type KvDtype } from '../../kv/kv-dtype.js';
import { ArrayKvMemory, type KvArray } from '../array-kv-memory.js';
import { kvBytesPerToken, type ModelConfig } from '../../model/config.js';
import type { ModelRunner, RunnerStats, StepLogits, StepRow } from '../model-runner.js';
import type { KernelExports } from './edge-kernels.js';
import type { KernelModel } from './kernel-model.js';
import { align, type LinearMemory } from './linear-memory.js';
import { PassAdapters } from './lora-deltas.js';
import { CHUNK, LOGIT_ROWS, logitChunkRows, passLayout, passScratchBytes } from './scratch-layout.js';
import { vocabRows, type LlamaWeights } from './weights/llama-weights.js';
import type { Matrix } from './weights/matrix.js';
import {
  kernelRows,
  packedOffsets,
  StaleLogitsError,
  type KernelRow,
  type Pass,
  type ProductInput,
  type Scratch,
} from './kernel-pass.js';

/** Per KV dtype: attention's kv_type code (kernels/attention.c), the kv_write that stores it, the array that views it. */
const KV_KERNELS = {
  fp32: { code: 0, write: 'kv_write', View: Float32Array },
  fp16: { code: 1, write: 'kv_write_f16', View: Uint16Array },
  int8: { code: 2, write: 'kv_write_i8', View: Int8Array },
} as const satisfies Record<
  KvDtype,
  {
    code: number;
    write: keyof KernelExports;
    View: { new (b: ArrayBuffer, at: number, n: number): KvArray; BYTES_PER_ELEMENT: number };
  }
>;

/**
 * The model runner on our own WebAssembly kernels (kernels/*.c): the whole Llama forward pass (with Qwen2's
 * q/k/v biases, Qwen3's q/k norms and Gemma 3's post-norms, GeGLU and sliding windows where the weights and
 * config have them) over weights held once, in their stored format, in the kernels' linear memory, with the
 * KV block pool in that same memory. Attention reads each sequence's past straight from its blocks through its block
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
  readonly givesHiddenStates = true;
  /** Rows may run with a LoRA adapter each (lora-deltas.ts). */
  readonly rowAdapters = true;

  readonly config: ModelConfig;
  readonly memory: LinearMemory;
  readonly weights: LlamaWeights;
  private readonly kernels: KernelExports;
  /** This engine's KV pool: one region of the shared memory (every layer's keys, then every layer's values). */
  private pool: { region: number; stopRemaking: () => void } | undefined;
  private kvKeys: number[] = [];
  private kvValues: number[] = [];
  private blockSize = 0;
  /** The pool's element type: how attention reads it and which kv_write stores it. */
  private kvKernels: (typeof KV_KERNELS)[KvDtype] = KV_KERNELS.fp32;
  /** What sized the scratch: the largest pass, and the pool that bounds its score rows. */
  private readonly limits: EngineLimits;
  /** Set once released (or its pool taken back by the isolate): a later pass would write bytes it no longer owns. */
  private released = false;
  /** This pass's scratch, laid out anew each pass in the model's shared arena. */
  private scratch!: Scratch;
  /** Counts inputs made (input()): a product checks it is given the newest, whose quantised rows are in scratch. */
  private inputs = 0;
  /** The last pass's residual stream (M, hidden), each row's token offsets in it, and its arena epoch. */
  private last: { residual: number; firstToken: number[]; epoch: number } | undefined;

  /** A runner for one engine over `model`'s shared weights; the shared scratch grows to what its limits need. */
  static over(model: KernelModel, limits: EngineLimits): KernelRunner {
    return new KernelRunner(model, limits);
  }

  protected constructor(
    protected readonly model: KernelModel,
    limits: EngineLimits,
  ) {
    model.arena.reserve(passScratchBytes(model.config, limits, model.weights));
    this.limits = limits;
    this.config = model.config;
    this.memory = model.memory;
    this.weights = model.weights;
    this.kernels = model.kernels;
  }

  stats(): RunnerStats {
    return { runner: 'kernels', wasmMemoryBytes: this.memory.bytes };
  }

  /** Bytes of linear memory now (weights + every KV pool + scratch + the kernels' own stack and data). */
  get memoryBytes(): number {
    return this.memory.bytes;
  }

  /**
   * Places the engine's KV block pool in linear memory: per layer of this memory's span, keys and values
   * (numBlocks, kv_heads, blockSize, row) of `dtype` (ArrayKvMemory's layout), which attention reads in
   * place. A stage's pool holds its own layers only, whatever `shape` says of the whole model.
   */
  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): ArrayKvMemory {
    if (this.pool) throw new Error('the KV pool is already allocated');
    // The pool bounds attention's score rows: one longer than the limits said (a stage or GPU host opened with
    // another element type or more blocks) needs more scratch, found now rather than as a pass's refusal. The
    // arena never shrinks, so a pool the limits already cover changes nothing.
    const poolBytes = numBlocks * blockSize * kvBytesPerToken(this.config, dtype);
    this.model.arena.reserve(
      passScratchBytes(this.config, { ...this.limits, kvDtype: dtype, kvCacheBytes: poolBytes }, this.weights),
    );
    const { from, to } = this.weights.span;
    const own = { ...shape, numLayers: to - from };
    const bytes = numBlocks * shape.numKvHeads * blockSize * kvRowBytes(shape.headDim, dtype);
    const region = this.memory.alloc(Math.max(1, 2 * own.numLayers * bytes));
    for (let layer = 0; layer < own.numLayers; layer++) {
      this.kvKeys.push(region + layer * bytes);
      this.kvValues.push(region + (own.numLayers + layer) * bytes);
    }
    this.blockSize = blockSize;
    this.kvKernels = KV_KERNELS[dtype];
    const { View } = this.kvKernels;
    const view = (ptr: number): KvArray => new View(this.memory.memory.buffer, ptr, bytes / View.BYTES_PER_ELEMENT);
    const kv = new ArrayKvMemory(own, numBlocks, blockSize, dtype, {
      keys: this.kvKeys.map(view),
      values: this.kvValues.map(view),
    });
    // A grown memory detaches every view of the old buffer.
    const remake = (): void => {
      for (let layer = 0; layer < own.numLayers; layer++) {
        kv.keys[layer] = view(this.kvKeys[layer]);
        kv.values[layer] = view(this.kvValues[layer]);
      }
    };
    this.pool = { region, stopRemaking: this.memory.onGrow(remake) };
    return kv;
  }

  /**
   * Synchronous: the pass runs start to end without yielding, and its logits live in the shared scratch
   * until the next pass over this model's memory (any engine's), so the engine reads them before it yields.
   */
  forward(rows: readonly StepRow[]): StepLogits {
    for (const { kv, tokens } of rows) kv.checkWritable(tokens.length);
    const pass = this.begin(kernelRows(rows), true);
    this.embedTokens(
      pass,
      rows.flatMap((r) => r.tokens),
    );
    this.runLayers(pass);
    for (const { kv, tokens } of rows) kv.advance(tokens.length);
    return this.outputLogits(pass);
  }

  /** Scratch, RoPE tables and block tables of a pass; whatever the last pass (of any engine) left there is gone. */
  protected begin(rows: readonly KernelRow[], logits: boolean): Pass {
    if (this.released) throw new Error('this runner was released: its KV pool is no longer its own');
    const { from, to } = this.weights.span;
    if (!this.pool && to > from) throw new Error('createKvMemory() before the first pass');
    if (logits && !this.weights.ends) throw new Error("this memory holds layers only: logits are the head's");
    const { headDim } = this.config;
    const counts = rows.map((r) => r.count);
    const starts = rows.map((r) => r.start);
    const { offsets: firstToken, total: M } = packedOffsets(counts);
    const { offsets: tableStart, total: tableEntries } = packedOffsets(rows.map((r) => r.blocks.length));
    // Logits for each row's last positions (its last token, or a verification's proposals and the token after
    // them), in one batched output projection; past LOGIT_ROWS more than one per row, the rest are lazy.
    const want = rows.map((r, i) => (logits ? Math.min(counts[i], Math.max(1, r.logits ?? 1)) : 0));
    let extra = LOGIT_ROWS;
    for (const [i, w] of want.entries()) {
      if (w === 0) continue;
      want[i] = 1 + Math.min(w - 1, extra);
      extra -= want[i] - 1;
    }
    const { offsets: logitStart, total: logitRows } = packedOffsets(want);

    // Adapters are placed before the pass's views are made: placing one may grow the memory.
    const { hiddenSize, numHeads, numKvHeads } = this.config;
    const widest = Math.max(hiddenSize, numHeads * headDim, numKvHeads * headDim, this.weights.intermediateSize);
    const adapters = PassAdapters.of(
      rows.map((r) => r.variant),
      counts,
      this.memory,
      this.kernels,
      widest,
    );
    const epoch = this.model.arena.begin();
    const mem = this.memory;
    const scoreRow = Math.max(...rows.map((_r, i) => Math.min(CHUNK, counts[i]) * (starts[i] + counts[i] + 8)));
    const sizes = passLayout(this.config, { tokens: M, tableEntries, scoreRow, logitRows }, this.weights);
    const scratch = {} as Scratch;
    for (const name of Object.keys(sizes) as (keyof Scratch)[]) scratch[name] = this.model.arena.alloc(sizes[name]);
    this.scratch = scratch;

    // Views are made after every alloc (none grows later).
    const tables: [number, number, Float32Array | undefined][] = [
      [scratch.cos, scratch.sin, this.weights.invFreq],
      [scratch.cosLocal, scratch.sinLocal, this.weights.localInvFreq],
    ];
    for (const [cos, sin, invFreq] of tables) {
      if (!invFreq) continue;
      const cosView = mem.f32(cos, M * (headDim / 2));
      const sinView = mem.f32(sin, M * (headDim / 2));
      rows.forEach((row, r) => {
        for (let i = 0; i < row.count; i++) {
          const pos = starts[r] + i;
          const at = (firstToken[r] + i) * (headDim / 2);
          // float64 angles, rounded once: the float32 graph's pos * inv_freq rounds before the cosine.
          for (let j = 0; j < headDim / 2; j++) {
            cosView[at + j] = Math.cos(pos * invFreq[j]);
            sinView[at + j] = Math.sin(pos * invFreq[j]);
          }
        }
      });
    }
    for (const [r, row] of rows.entries())
      mem.i32(scratch.tables + tableStart[r] * 4, row.blocks.length).set(row.blocks);
    return {
      rows,
      counts,
      starts,
      firstToken,
      tableStart,
      tokens: M,
      want,
      logitStart,
      logitRows,
      epoch,
      scratch,
      adapters,
    };
  }

  protected embedTokens(pass: Pass, ids: readonly number[]): void {
    if (!this.weights.ends) throw new Error("this memory holds layers only: the embedding is the head's");
    const H = this.config.hiddenSize;
    for (const [t, id] of ids.entries()) this.embed(this.weights.ends.embedding, pass.scratch.residual + t * H * 4, id);
  }

  protected setResidual(pass: Pass, hidden: Float32Array): void {
    const n = pass.tokens * this.config.hiddenSize;
    if (hidden.length !== n)
      throw new RangeError(`a pass of ${pass.tokens} tokens takes ${n} hidden floats, got ${hidden.length}`);
    this.memory.f32(pass.scratch.residual, n).set(hidden);
  }

  /** This memory's layers over the pass's residual stream, CHUNK tokens at a time. */
  protected runLayers(pass: Pass): void {
    const { hiddenSize: H, headDim, numHeads, numKvHeads } = this.config;
    const k = this.kernels;
    const s = pass.scratch;
    const { counts, starts, firstToken, tableStart, tokens: M } = pass;
    const qOut = numHeads * headDim;
    const kvOut = numKvHeads * headDim;
    const I = this.weights.intermediateSize;
    const rowOf = counts.flatMap((n, r) => Array.from({ length: n }, () => r));
    const { attentionScale: scale, slidingWindow, rmsNormEps: eps } = this.config;
    const act = this.config.hiddenAct === 'gelu_tanh' ? k.gelu_tanh_mul : k.silu_mul;
    const { from, to } = this.weights.span;
    for (let layer = from; layer < to; layer++) {
      const w = this.weights.layers[layer];
      const keys = this.kvKeys[layer - from];
      const values = this.kvValues[layer - from];
      const sliding = slidingWindow?.layers[layer] === true;
      const window = sliding ? slidingWindow!.size : 0;
      const [cos, sin] = sliding ? [s.cosLocal, s.sinLocal] : [s.cos, s.sin];
      for (let c0 = 0; c0 < M; c0 += CHUNK) {
        const n = Math.min(CHUNK, M - c0);
        const x = s.residual + c0 * H * 4;
        k.rmsnorm(s.h, x, w.attnNorm, n, H, eps);
        const attnIn = this.input(s.h, n, w.q, w.k, w.v);
        this.linear(s.q, attnIn, w.q);
        this.linear(s.k, attnIn, w.k);
        this.linear(s.v, attnIn, w.v);
        const lora = pass.adapters;
        lora?.add('q_proj', layer, s.q, s.h, c0, n);
        lora?.add('k_proj', layer, s.k, s.h, c0, n);
        lora?.add('v_proj', layer, s.v, s.h, c0, n);
        if (w.bias) {
          // Row by row: the same float additions whatever the chunk, so batch invariance holds.
          for (let r = 0; r < n; r++) {
            k.add_inplace(s.q + r * qOut * 4, w.bias.q, qOut);
            k.add_inplace(s.k + r * kvOut * 4, w.bias.k, kvOut);
            k.add_inplace(s.v + r * kvOut * 4, w.bias.v, kvOut);
          }
        }
        if (w.qkNorm) {
          // Each head of each token is a row of head_dim (q and k are (n, heads, head_dim) end to end).
          k.rmsnorm(s.q, s.q, w.qkNorm.q, n * numHeads, headDim, eps);
          k.rmsnorm(s.k, s.k, w.qkNorm.k, n * numKvHeads, headDim, eps);
        }
        k.rope(s.q, cos + c0 * (headDim / 2) * 4, sin + c0 * (headDim / 2) * 4, n, numHeads, headDim, qOut);
        k.rope(s.k, cos + c0 * (headDim / 2) * 4, sin + c0 * (headDim / 2) * 4, n, numKvHeads, headDim, kvOut);
        // Each run of one row's tokens inside the chunk: store its keys and values, then attend.
        for (let t = c0; t < c0 + n; ) {
          const r = rowOf[t];
          const run = Math.min(c0 + n, firstToken[r] + counts[r]) - t;
          const start = starts[r] + (t - firstToken[r]);
          const table = s.tables + tableStart[r] * 4;
          const local = t - c0;
          k[this.kvKernels.write](
            keys,
            values,
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
            keys,
            values,
            table,
            start,
            run,
            numHeads,
            numKvHeads,
            headDim,
            this.blockSize,
            scale,
            s.scores,
            this.kvKernels.code,
            window,
          );
          t += run;
        }
        this.linear(s.out, this.input(s.ctx, n, w.o), w.o);
        lora?.add('o_proj', layer, s.out, s.ctx, c0, n);
        if (w.postNorm) k.rmsnorm(s.out, s.out, w.postNorm.attn, n, H, eps);
        k.add_inplace(x, s.out, n * H);
        k.rmsnorm(s.h, x, w.mlpNorm, n, H, eps);
        const mlpIn = this.input(s.h, n, w.gate, w.up);
        this.linear(s.gate, mlpIn, w.gate);
        this.linear(s.up, mlpIn, w.up);
        lora?.add('gate_proj', layer, s.gate, s.h, c0, n);
        lora?.add('up_proj', layer, s.up, s.h, c0, n);
        act(s.gate, s.up, align(n * I, 4));
        this.linear(s.out, this.input(s.gate, n, w.down), w.down);
        lora?.add('down_proj', layer, s.out, s.gate, c0, n);
        if (w.postNorm) k.rmsnorm(s.out, s.out, w.postNorm.mlp, n, H, eps);
        k.add_inplace(x, s.out, n * H);
      }
    }
  }

  /**
   * The final norm and output projection of each row's wanted positions, a chunk of rows at a time as they are
   * read (logitChunkRows: the scratch holds one chunk); any other position on demand (`at`). A returned array
   * is a view of the scratch, good until the next read.
   */
  protected outputLogits(pass: Pass): StepLogits {
    const { hiddenSize: H } = this.config;
    const ends = this.weights.ends!;
    // The output projection's rows: the whole vocabulary, or a vocabulary stage's part of it.
    const vocabSize = ends.lmHead.n;
    const s = pass.scratch;
    const { counts, firstToken, want, logitStart, logitRows, epoch } = pass;
    const mem = this.memory;
    const all = mem.u8(0, mem.bytes);
    for (const [r, n] of want.entries()) {
      const from = s.residual + (firstToken[r] + counts[r] - n) * H * 4;
      all.copyWithin(s.lastRows + logitStart[r] * H * 4, from, from + n * H * 4);
    }
    this.last = { residual: s.residual, firstToken, epoch };
    const per = logitChunkRows(this.weights, logitRows);
    /** Which chunk of this pass's logit rows the scratch's logits hold (-1: none, or another position's). */
    let held = -1;
    const view = (slot: number): Float32Array => {
      this.checkCurrent(epoch);
      const chunk = Math.floor(slot / per);
      if (held !== chunk) {
        this.projectRows(s.logits, s.lastRows + chunk * per * H * 4, Math.min(per, logitRows - chunk * per));
        held = chunk;
      }
      return mem.f32(s.logits + (slot - chunk * per) * vocabSize * 4, vocabSize);
    };
    return {
      last: (row) => view(logitStart[row] + want[row] - 1),
      at: (row, index) => {
        const fromEnd = counts[row] - 1 - index;
        if (fromEnd < want[row]) return view(logitStart[row] + want[row] - 1 - fromEnd);
        held = -1; // logitsAt computes into the same buffer
        return this.logitsAt(firstToken[row] + index);
      },
      hidden: (row) => this.hiddenStates(firstToken[row], counts[row]),
    };
  }

  /** out (n, vocab rows) = the output projection of the final norm of n hidden rows at `rows`. */
  private projectRows(out: number, rows: number, n: number): void {
    const { hiddenSize: H, rmsNormEps: eps } = this.config;
    const { norm, lmHead } = this.weights.ends!;
    const vocabSize = lmHead.n;
    for (let r0 = 0; r0 < n; r0 += CHUNK) {
      const m = Math.min(CHUNK, n - r0);
      this.kernels.rmsnorm(this.scratch.h, rows + r0 * H * 4, norm, m, H, eps);
      this.linear(out + r0 * vocabSize * 4, this.input(this.scratch.h, m, lmHead), lmHead);
    }
  }

  /** A pass's logits are read before another pass over the shared scratch; anything else is a bug to say aloud. */
  private checkCurrent(epoch: number): void {
    if (!this.model.arena.current(epoch)) throw new StaleLogitsError();
  }

  /** Logits after token `t` of the last pass (copied out: they are computed where the rows' chunk lies). */
  private logitsAt(t: number): Float32Array {
    this.checkCurrent(this.last!.epoch);
    this.projectRows(this.scratch.logits, this.last!.residual + t * this.config.hiddenSize * 4, 1);
    return this.memory.f32(this.scratch.logits, this.weights.ends!.lmHead.n).slice();
  }

  /** The final norm of tokens [t0, t0 + n) of the last pass's residual stream, (n, hidden), copied out. */
  private hiddenStates(t0: number, n: number): Float32Array {
    const { hiddenSize: H, rmsNormEps: eps } = this.config;
    this.checkCurrent(this.last!.epoch);
    const out = new Float32Array(n * H);
    const h = this.scratch.h;
    for (let c = 0; c < n; c += CHUNK) {
      const m = Math.min(CHUNK, n - c);
      this.kernels.rmsnorm(h, this.last!.residual + (t0 + c) * H * 4, this.weights.ends!.norm, m, H, eps);
      out.set(this.memory.f32(h, m * H), c * H);
    }
    return out;
  }

  private embed(e: Matrix, out: number, token: number): void {
    const { hiddenSize: H, vocabSize } = this.config;
    const rows = vocabRows(this.weights.span, vocabSize);
    if (!Number.isInteger(token) || token < rows.from || token >= rows.to)
      throw new RangeError(
        `token id ${token} is outside the vocabulary${rows.to - rows.from < vocabSize ? ` rows ${rows.from}..${rows.to - 1} this memory holds` : ` (${vocabSize})`}`,
      );
    const id = token - rows.from;
    if (e.kind === 'quant') this.kernels.dequantize_column(out, e.header, id, e.blocks);
    else if (e.dtype === 'f16') this.kernels.embed_f16(out, e.ptr, id, H);
    else if (e.dtype === 'bf16') this.kernels.embed_bf16(out, e.ptr, id, H);
    else this.memory.u8(0, this.memory.bytes).copyWithin(out, e.ptr + id * H * 4, e.ptr + (id + 1) * H * 4);
    // Gemma's sqrt(hidden), once per row wherever the row is read (a vocabulary stage's rows too).
    if (this.config.embeddingScale !== 1) this.kernels.scale_inplace(out, this.config.embeddingScale, H);
  }

  /**
   * x (rows, K) as the input of the products that read it (q, k and v; gate and up), made once for all of them:
   * where one is quantised, x is quantised per block of its own row into the scratch's xq / xs / xsum now, so
   * nothing about x is remembered between calls. Valid until the next input() (the scratch is one).
   */
  private input(x: number, rows: number, ...readers: Matrix[]): ProductInput {
    const quant = readers.filter((w) => w.kind === 'quant');
    const id = ++this.inputs;
    if (quant.length === 0) return { id, x, rows };
    const { k: K, blocks } = quant[0];
    if (quant.some((w) => w.k !== K || w.blocks !== blocks))
      throw new Error('the products of one input must quantise it alike (the same K and blocks)');
    const s = this.scratch;
    this.kernels.quantize_rows(s.xq, s.xs, s.xsum, x, rows, K, blocks);
    return { id, x, rows, quantised: { k: K, blocks } };
  }

  /** out (rows, w.n) = input (rows, w.k) @ w, in w's stored format. */
  private linear(out: number, input: ProductInput, w: Matrix): void {
    const k = this.kernels;
    const { x, rows } = input;
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
    if (input.id !== this.inputs || input.quantised?.k !== w.k || input.quantised.blocks !== w.blocks)
      throw new Error('a quantised product was given an input made for another, or overwritten since');
    const s = this.scratch;
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

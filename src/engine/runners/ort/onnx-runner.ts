import { InvalidRequestError } from '../../errors.js';
import type { KvDtype, KvShape } from '../../kv/block-pool.js';
import type { PagedSequenceKv } from '../../kv/paged-kv.js';
import type { ModelConfig } from '../../model/config.js';
import { ArrayKvMemory } from '../array-kv-memory.js';
import type { ModelRunner, RunnerStats, StepLogits, StepRow } from '../model-runner.js';
import type { GraphIo } from './graph-io.js';
import type { EngineRuntime, OrtSession, OrtTensor } from '../../model/runtime.js';
import { loadSession, type SessionOptions } from './session-loader.js';

/**
 * The id, position and mask inputs of one pass in the layout below (P = longest past, S = most new
 * tokens): ids and positions (batch, S), the attention mask (batch, P + S). Shared by OnnxRunner and GpuRunner.
 */
export function stepInputs(
  rows: readonly StepRow[],
  P: number,
  S: number,
): { inputIds: BigInt64Array; positionIds: BigInt64Array; attentionMask: BigInt64Array } {
  const B = rows.length;
  const T = P + S;
  const inputIds = new BigInt64Array(B * S); // (batch, S)
  const positionIds = new BigInt64Array(B * S); // (batch, S)
  const attentionMask = new BigInt64Array(B * T); // (batch, T)
  rows.forEach(({ kv, tokens }, b) => {
    const p = kv.length;
    const pad = S - tokens.length;
    attentionMask.fill(1n, b * T + P - p, b * T + P);
    for (let i = 0; i < tokens.length; i++) {
      inputIds[b * S + pad + i] = BigInt(tokens[i]);
      positionIds[b * S + pad + i] = BigInt(p + i);
      attentionMask[b * T + P + pad + i] = 1n;
    }
  });
  return { inputIds, positionIds, attentionMask };
}

/**
 * Runs the ONNX graph over a batch of sequences with different past and new lengths.
 *
 * Layout of one batch row in time (P = longest past, S = most new tokens, T = P + S):
 *   slots [0, P - p)         padding (mask 0)
 *   slots [P - p, P)         this row's p cached tokens, gathered from its paged cache
 *   slots [P, P + S - s)     padding new tokens (mask 0, id 0, position 0)
 *   slots [P + S - s, T)     this row's s new tokens, positions p .. p + s - 1
 * The graph's causal rule (key j visible to query i iff j <= P + i) then lets each real query see
 * exactly its own past and earlier new tokens, and the new keys come back at [P + S - s, T).
 */
export class OnnxRunner implements ModelRunner {
  readonly name = 'onnxruntime';
  readonly kvIdentity = 'onnxruntime';
  readonly deviceSampling = undefined;

  /** The pool's bytes (createKvMemory): JS arrays each pass gathers from and scatters into. */
  private kvMemory: ArrayKvMemory | undefined;
  /**
   * The last pass's `present` tensors, which are the next pass's `past` exactly when the same rows come
   * back each having fed the same number of tokens (steady decode): then the gather is skipped. The pool
   * stays the memory of record (every pass still scatters into it); this is a copy of what it holds.
   */
  private carried:
    | { kvs: PagedSequenceKv[]; lengths: number[]; slots: number; out: Record<string, OrtTensor> }
    | undefined;

  private constructor(
    private readonly runtime: EngineRuntime,
    private readonly session: OrtSession,
    readonly config: ModelConfig,
    /** The graph's I/O types (fp16 KV / logits in Hugging Face fp16 exports), read from the session. */
    readonly io: GraphIo,
  ) {}

  static async create(
    runtime: EngineRuntime,
    onnx: Uint8Array,
    config: ModelConfig,
    options: SessionOptions = {},
  ): Promise<OnnxRunner> {
    const { session, io } = await loadSession(runtime, onnx, config, options);
    return new OnnxRunner(runtime, session, config, io);
  }

  /** onnxruntime computes in float32 KV: the pool is plain JS arrays, gathered into each pass's inputs. */
  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): ArrayKvMemory {
    refuseNarrowKv(dtype);
    if (this.kvMemory) throw new Error('the KV pool is already allocated');
    this.kvMemory = new ArrayKvMemory(shape, numBlocks, blockSize);
    return this.kvMemory;
  }

  stats(): RunnerStats {
    return { runner: 'onnxruntime' };
  }

  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    const memory = this.kvMemory;
    if (!memory) throw new Error('createKvMemory() before the first pass');
    for (const { kv, tokens } of rows) kv.checkWritable(tokens.length);
    const { numLayers, numKvHeads, headDim, vocabSize } = this.config;
    const B = rows.length;
    const P = Math.max(...rows.map((r) => r.kv.length));
    const S = Math.max(...rows.map((r) => r.tokens.length));
    const T = P + S;

    const { inputIds, positionIds, attentionMask } = stepInputs(rows, P, S);

    const Tensor = this.runtime.Tensor;
    const feeds: Record<string, OrtTensor> = {
      input_ids: new Tensor('int64', inputIds, [B, S]),
      attention_mask: new Tensor('int64', attentionMask, [B, T]),
    };
    if (this.io.hasPositionIds) feeds.position_ids = new Tensor('int64', positionIds, [B, S]);
    const carried = this.carried;
    this.carried = undefined;
    const reuse =
      carried !== undefined &&
      carried.slots === P &&
      carried.kvs.length === B &&
      rows.every((r, b) => r.kv === carried.kvs[b] && r.kv.length === carried.lengths[b]);
    const pastRow = numKvHeads * P * headDim;
    for (let layer = 0; layer < numLayers; layer++) {
      if (reuse) {
        feeds[`past_key_values.${layer}.key`] = carried.out[`present.${layer}.key`];
        feeds[`past_key_values.${layer}.value`] = carried.out[`present.${layer}.value`];
        continue;
      }
      const keys = new Float32Array(B * pastRow); // (batch, kv_heads, P, head_dim)
      const values = new Float32Array(B * pastRow);
      rows.forEach(({ kv }, b) => {
        const at = b * pastRow;
        memory.gather(kv, layer, keys.subarray(at, at + pastRow), values.subarray(at, at + pastRow), P, P - kv.length);
      });
      feeds[`past_key_values.${layer}.key`] = this.io.kvTensor(keys, [B, numKvHeads, P, headDim]);
      feeds[`past_key_values.${layer}.value`] = this.io.kvTensor(values, [B, numKvHeads, P, headDim]);
    }

    const out = await this.session.run(feeds);

    const presentRow = numKvHeads * T * headDim;
    for (let layer = 0; layer < numLayers; layer++) {
      const keys = this.io.floats(out[`present.${layer}.key`]); // (batch, kv_heads, T, head_dim)
      const values = this.io.floats(out[`present.${layer}.value`]);
      rows.forEach(({ kv, tokens }, b) => {
        const at = b * presentRow;
        memory.scatter(
          kv,
          layer,
          keys.subarray(at, at + presentRow),
          values.subarray(at, at + presentRow),
          T,
          T - tokens.length,
          tokens.length,
        );
      });
    }
    for (const { kv, tokens } of rows) kv.advance(tokens.length);
    // Rows that all fed S tokens leave no padding between their past and new slots: present is contiguous.
    if (rows.every((r) => r.tokens.length === S)) {
      const presents: Record<string, OrtTensor> = {}; // not the logits: a long prefill's are hundreds of MB
      for (let layer = 0; layer < numLayers; layer++)
        for (const kind of ['key', 'value']) presents[`present.${layer}.${kind}`] = out[`present.${layer}.${kind}`];
      this.carried = { kvs: rows.map((r) => r.kv), lengths: rows.map((r) => r.kv.length), slots: T, out: presents };
    }

    const logits = this.io.floats(out.logits); // (batch, S, vocab)
    const at = (row: number, index: number): Float32Array => {
      const offset = (row * S + S - rows[row].tokens.length + index) * vocabSize;
      return logits.subarray(offset, offset + vocabSize);
    };
    return { at, last: (row) => at(row, rows[row].tokens.length - 1) };
  }

  async release(): Promise<void> {
    this.carried = undefined;
    await this.session.release();
  }
}

/** onnxruntime's runners keep float32 KV; float16 and 8-bit pools exist on the edge kernels only. */
export function refuseNarrowKv(dtype: KvDtype): undefined {
  if (dtype !== 'fp32')
    throw new InvalidRequestError(
      'KV_DTYPE',
      `a ${dtype} KV cache needs the edge kernels (backend wasm or kernels); onnxruntime keeps float32`,
      'unsupported_model',
    );
  return undefined;
}

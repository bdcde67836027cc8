import type { ModelConfig } from './config.js';
import type { OrtRuntime, OrtSession, OrtTensor } from './runtime.js';
import type { SequenceKv } from '../kv/sequence-kv.js';

/** One sequence in a model pass: the tokens it feeds now, and the cache holding everything before them. */
export interface StepRow {
  kv: SequenceKv;
  /** New tokens, at positions kv.length, kv.length + 1, ... (non-empty). */
  tokens: readonly number[];
}

/** What a pass produced: next-token logits for every fed token of every row. */
export interface StepLogits {
  /** Logits after row `row`'s token `index` (index into that row's `tokens`), vocab_size floats. */
  at(row: number, index: number): Float32Array;
  /** Logits after each row's last fed token. */
  last(row: number): Float32Array;
}

export interface RunnerOptions {
  /** Threads for one op (native CPU backend only; WASM threads are set on its env). */
  intraOpNumThreads?: number;
}

/**
 * Runs the ONNX graph over a batch of sequences with different past and new lengths.
 *
 * Layout of one batch row in time (P = longest past, S = most new tokens, T = P + S):
 *   slots [0, P - p)         padding (mask 0)
 *   slots [P - p, P)         this row's p cached tokens, gathered from its SequenceKv
 *   slots [P, P + S - s)     padding new tokens (mask 0, id 0, position 0)
 *   slots [P + S - s, T)     this row's s new tokens, positions p .. p + s - 1
 * The graph's causal rule (key j visible to query i iff j <= P + i) then lets each real query see
 * exactly its own past and earlier new tokens, and the new keys come back at [P + S - s, T).
 */
export class ModelRunner {
  private constructor(
    private readonly runtime: OrtRuntime,
    private readonly session: OrtSession,
    readonly config: ModelConfig,
  ) {}

  static async create(runtime: OrtRuntime, onnx: Uint8Array, config: ModelConfig, options: RunnerOptions = {}): Promise<ModelRunner> {
    const session = await runtime.InferenceSession.create(onnx, {
      executionProviders: runtime.executionProviders,
      graphOptimizationLevel: 'all',
      ...(options.intraOpNumThreads ? { intraOpNumThreads: options.intraOpNumThreads } : {}),
    });
    return new ModelRunner(runtime, session, config);
  }

  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    const { numLayers, numKvHeads, headDim, vocabSize } = this.config;
    const B = rows.length;
    const P = Math.max(...rows.map((r) => r.kv.length));
    const S = Math.max(...rows.map((r) => r.tokens.length));
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

    const Tensor = this.runtime.Tensor;
    const feeds: Record<string, OrtTensor> = {
      input_ids: new Tensor('int64', inputIds, [B, S]),
      attention_mask: new Tensor('int64', attentionMask, [B, T]),
      position_ids: new Tensor('int64', positionIds, [B, S]),
    };
    const pastRow = numKvHeads * P * headDim;
    for (let layer = 0; layer < numLayers; layer++) {
      const keys = new Float32Array(B * pastRow); // (batch, kv_heads, P, head_dim)
      const values = new Float32Array(B * pastRow);
      rows.forEach(({ kv }, b) => {
        const at = b * pastRow;
        kv.gather(layer, keys.subarray(at, at + pastRow), values.subarray(at, at + pastRow), P, P - kv.length);
      });
      feeds[`past_key_values.${layer}.key`] = new Tensor('float32', keys, [B, numKvHeads, P, headDim]);
      feeds[`past_key_values.${layer}.value`] = new Tensor('float32', values, [B, numKvHeads, P, headDim]);
    }

    const out = await this.session.run(feeds);

    const presentRow = numKvHeads * T * headDim;
    for (let layer = 0; layer < numLayers; layer++) {
      const keys = out[`present.${layer}.key`].data as Float32Array; // (batch, kv_heads, T, head_dim)
      const values = out[`present.${layer}.value`].data as Float32Array;
      rows.forEach(({ kv, tokens }, b) => {
        const at = b * presentRow;
        kv.scatter(layer, keys.subarray(at, at + presentRow), values.subarray(at, at + presentRow), T, T - tokens.length, tokens.length);
      });
    }
    for (const { kv, tokens } of rows) kv.advance(tokens.length);

    const logits = out.logits.data as Float32Array; // (batch, S, vocab)
    const at = (row: number, index: number): Float32Array => {
      const offset = (row * S + S - rows[row].tokens.length + index) * vocabSize;
      return logits.subarray(offset, offset + vocabSize);
    };
    return { at, last: (row) => at(row, rows[row].tokens.length - 1) };
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}

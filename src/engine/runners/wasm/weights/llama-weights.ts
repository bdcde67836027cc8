import type { ModelConfig } from '../../../model/config.js';
import type { Matrix } from './matrix.js';
import { UnsupportedByKernels } from '../../../formats/unsupported.js';

export interface LayerWeights {
  attnNorm: number; // (hidden) float32
  q: Matrix; // hidden -> heads * head_dim
  k: Matrix; // hidden -> kv_heads * head_dim
  v: Matrix; // hidden -> kv_heads * head_dim
  o: Matrix; // heads * head_dim -> hidden
  mlpNorm: number; // (hidden) float32
  gate: Matrix; // hidden -> intermediate
  up: Matrix; // hidden -> intermediate
  down: Matrix; // intermediate -> hidden
  /** Qwen2's biases of q, k and v (heads * head_dim, kv_heads * head_dim twice) float32. */
  bias?: { q: number; k: number; v: number };
  /** Qwen3's and Gemma 3's RMSNorm weights over each head of q and of k, before RoPE: (head_dim) float32 each. */
  qkNorm?: { q: number; k: number };
  /** Gemma 3's norms of the attention's and the MLP's outputs, before each joins the residual: (hidden) float32. */
  postNorm?: { attn: number; mlp: number };
}

/** What a layer of config.json's model_type has beyond a Llama layer's, which a loader must find. */
export function layerExtras(config: ModelConfig): { bias: boolean; qkNorm: boolean; postNorm: boolean } {
  const gemma3 = config.modelType === 'gemma3_text';
  return { bias: config.modelType === 'qwen2', qkNorm: config.modelType === 'qwen3' || gemma3, postNorm: gemma3 };
}

/**
 * Which of a model's weights one memory holds: layers [from, to), and with `ends` the embedding, the final
 * norm and the output projection. The whole model, or one pipeline stage's share of it.
 */
export interface LayerSpan {
  from: number;
  to: number;
  ends: boolean;
  /**
   * With `ends`, only these rows of the embedding and output projection (a vocabulary too large for one
   * isolate, split over the stages); absent: every row.
   */
  vocab?: VocabRows;
}

/** Token ids [from, to): one stage's rows of the embedding and output projection. */
export interface VocabRows {
  from: number;
  to: number;
}

/** The rows of the tables `span` holds, of a vocabulary of `vocabSize`. */
export function vocabRows(span: LayerSpan, vocabSize: number): VocabRows {
  return span.vocab ?? { from: 0, to: vocabSize };
}

export function wholeModel(config: ModelConfig): LayerSpan {
  return { from: 0, to: config.numLayers, ends: true };
}

/** Whether a weight of `layer` (undefined: an end's) belongs to `span`. */
export function inSpan(span: LayerSpan, layer: number | undefined): boolean {
  return layer === undefined ? span.ends : layer >= span.from && layer < span.to;
}

/** The ends of a model (absent from a stage that holds only layers). */
export interface EndWeights {
  /** The token embedding table: N = vocab rows of K = hidden (an `nk` dense table or a quantised one). */
  embedding: Matrix;
  norm: number; // (hidden) float32
  lmHead: Matrix; // hidden -> vocab (the embedding itself when tied)
}

/** A Llama decoder's weights in linear memory (the span's), each once, in the format the kernels read it. */
export interface LlamaWeights {
  span: LayerSpan;
  ends: EndWeights | undefined;
  /** Indexed by layer: entries [span.from, span.to) are present, the others holes. */
  layers: LayerWeights[];
  /** RoPE inverse frequencies (head_dim / 2), float32. */
  invFreq: Float32Array;
  /** Sliding layers' (config.slidingWindow), where their RoPE base is another. */
  localInvFreq?: Float32Array;
  intermediateSize: number;
  /** Bytes of weights placed in linear memory. */
  bytes: number;
}

/** kernels/attention.c's MAX_HEAD_DIM: the float32 copy of a float16 chunk of keys lies on its stack. */
const MAX_HEAD_DIM = 256;

/** Refuses weights whose shapes do not match config.json (a graph or file of another model). */
export function checkShapes(w: LlamaWeights, config: ModelConfig): void {
  const { hiddenSize: H, numHeads, numKvHeads, headDim, vocabSize } = config;
  const I = w.intermediateSize;
  const expect = (m: Matrix, k: number, n: number, what: string): void => {
    if (m.k !== k || m.n !== n)
      throw new UnsupportedByKernels(`${what} is ${m.k} -> ${m.n}, expected ${k} -> ${n} from config.json`);
  };
  if (H % 4 !== 0 || headDim % 8 !== 0 || headDim > MAX_HEAD_DIM)
    throw new UnsupportedByKernels(
      `hidden_size ${H} and head_dim ${headDim} must be multiples of 4 and 8, head_dim at most ${MAX_HEAD_DIM}`,
    );
  if (numHeads % numKvHeads !== 0)
    throw new UnsupportedByKernels('num_attention_heads must be a multiple of num_key_value_heads');
  if (w.ends) {
    const rows = vocabRows(w.span, vocabSize);
    expect(w.ends.embedding, H, rows.to - rows.from, 'the embedding');
    expect(w.ends.lmHead, H, rows.to - rows.from, 'the output projection');
  }
  w.layers.forEach((l, i) => {
    expect(l.q, H, numHeads * headDim, `layer ${i} q`);
    expect(l.k, H, numKvHeads * headDim, `layer ${i} k`);
    expect(l.v, H, numKvHeads * headDim, `layer ${i} v`);
    expect(l.o, numHeads * headDim, H, `layer ${i} o`);
    expect(l.gate, H, I, `layer ${i} gate`);
    expect(l.up, H, I, `layer ${i} up`);
    expect(l.down, I, H, `layer ${i} down`);
  });
}

/**
 * RoPE inverse frequencies from config.json, as Hugging Face computes them: 1 / theta^(2i / head_dim), with
 * Llama 3's frequency-dependent scaling or linear scaling when `rope_scaling` says so. For graphs that do not
 * hold their own table (the hub's exports) and for GGUF files.
 */
export function ropeInvFreq(config: ModelConfig): Float32Array {
  const { headDim, ropeTheta, ropeScaling } = config;
  if (ropeScaling?.type === 'other')
    throw new UnsupportedByKernels(
      `rope_scaling type ${ropeScaling.name} (the kernels compute default, linear and llama3 RoPE)`,
    );
  const out = new Float32Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) {
    let f = 1 / ropeTheta ** ((2 * i) / headDim);
    if (ropeScaling?.type === 'linear') f /= ropeScaling.factor;
    else if (ropeScaling?.type === 'llama3') {
      const { factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings: old } = ropeScaling;
      const wavelen = (2 * Math.PI) / f;
      const low = old / lowFreqFactor;
      const high = old / highFreqFactor;
      if (wavelen > low) f /= factor;
      else if (wavelen >= high) {
        const smooth = (old / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
        f = (1 - smooth) * (f / factor) + smooth * f;
      }
    }
    out[i] = f;
  }
  return out;
}

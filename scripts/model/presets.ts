// Model presets (docs/models.md, "Making models") and the config.json they produce.

export type PresetName =
  | 'tiny'
  | 'tiny-untied'
  | 'tiny-draft'
  | 'tiny-copy'
  | 'tiny-256'
  | 'bench-135m'
  | 'bench-135m-copy'
  | 'bench-360m'
  | 'bench-1b'
  | 'tiny-qwen2'
  | 'tiny-qwen3'
  | 'tiny-gemma3'
  | 'bench-qwen2-0.5b'
  | 'bench-qwen3-0.6b'
  | 'bench-gemma3-270m';
export const PRESET_NAMES: readonly PresetName[] = [
  'tiny',
  'tiny-untied',
  'tiny-draft',
  'tiny-copy',
  'tiny-256',
  'bench-135m',
  'bench-135m-copy',
  'bench-360m',
  'bench-1b',
  'tiny-qwen2',
  'tiny-qwen3',
  'tiny-gemma3',
  'bench-qwen2-0.5b',
  'bench-qwen3-0.6b',
  'bench-gemma3-270m',
];

/** Presets whose weights continue a repeated phrase of this many tokens (copy-weights.ts), not random ones. */
export const COPY_PERIOD: Partial<Record<PresetName, number>> = { 'tiny-copy': 8, 'bench-135m-copy': 16 };

/**
 * The decoder families the kernels run, by Hugging Face model_type: a Llama block, and what each adds to it
 * (llama.cpp's src/llama-model.cpp builds them the same way).
 * - `qwen2`: biases on the q, k and v projections.
 * - `qwen3`: an RMSNorm over each head of q and k (a head_dim weight each) before RoPE; head_dim is its own key.
 * - `gemma3`: Qwen3's q/k norms, norms of the attention's and the MLP's outputs too (Hugging Face stores every
 *   Gemma norm as w where the scale is 1 + w), GeGLU, embeddings times sqrt(hidden), and sliding-window
 *   attention on five layers of every six (their RoPE base 10000, the global layers' rope_theta).
 */
export type Architecture = 'llama' | 'qwen2' | 'qwen3' | 'gemma3';
export const ARCHITECTURES: readonly Architecture[] = ['llama', 'qwen2', 'qwen3', 'gemma3'];

/** Gemma 3: every SLIDING_PATTERN-th layer is global (llama.cpp's set_swa_pattern(6), HF's sliding_window_pattern). */
export const SLIDING_PATTERN = 6;
/** Gemma 3's local layers' RoPE base (rope_local_base_freq; llama.cpp's rope_freq_base_train_swa). */
export const LOCAL_ROPE_THETA = 10000;

export interface LlamaShape {
  /** Absent: llama. */
  architecture?: Architecture;
  /** Gemma 3: the window of its local layers. */
  slidingWindow?: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean;
  rmsNormEps: number;
  ropeTheta: number;
}

const tiny: LlamaShape = {
  hiddenSize: 64,
  intermediateSize: 176,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  headDim: 16,
  vocabSize: 512,
  maxPositionEmbeddings: 2048,
  tieWordEmbeddings: true,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
};

/** Rows of 256 (hidden and MLP), so GGUF's K-quants (super-blocks of 256) apply to every matrix. */
const tiny256: LlamaShape = {
  ...tiny,
  hiddenSize: 256,
  intermediateSize: 512,
  headDim: 64,
};

/** SmolLM2-135M's shapes. */
const bench135m: LlamaShape = {
  hiddenSize: 576,
  intermediateSize: 1536,
  numLayers: 30,
  numHeads: 9,
  numKvHeads: 3,
  headDim: 64,
  vocabSize: 49152,
  maxPositionEmbeddings: 8192,
  tieWordEmbeddings: true,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
};

/** SmolLM2-360M's shapes: 362M parameters, 1.45 GB in fp32, 0.26 GB in q4. */
const bench360m: LlamaShape = {
  hiddenSize: 960,
  intermediateSize: 2560,
  numLayers: 32,
  numHeads: 15,
  numKvHeads: 5,
  headDim: 64,
  vocabSize: 49152,
  maxPositionEmbeddings: 8192,
  tieWordEmbeddings: true,
  rmsNormEps: 1e-5,
  ropeTheta: 100000,
};

/**
 * Llama-3.2-1B's shapes (its 128k vocabulary, tied embeddings; the context cut to 8192): 1.24G parameters,
 * 4.9 GB in fp32, past protobuf's 2 GiB, so its fp32 and fp16 graphs are not written (model-make.ts).
 */
const bench1b: LlamaShape = {
  hiddenSize: 2048,
  intermediateSize: 8192,
  numLayers: 16,
  numHeads: 32,
  numKvHeads: 8,
  headDim: 64,
  vocabSize: 128256,
  maxPositionEmbeddings: 8192,
  tieWordEmbeddings: true,
  rmsNormEps: 1e-5,
  ropeTheta: 500000,
};

/** Qwen2.5's block (q/k/v biases, rope theta 1e6) at tiny's size. */
const tinyQwen2: LlamaShape = { ...tiny, architecture: 'qwen2', ropeTheta: 1_000_000, rmsNormEps: 1e-6 };

/** Qwen3's block (q/k norms) at tiny's size, with head_dim 32 where hidden / heads is 16, as Qwen3's 128 is not 1024 / 16. */
const tinyQwen3: LlamaShape = { ...tinyQwen2, architecture: 'qwen3', headDim: 32 };

/**
 * Gemma 3's block at tiny's size, shaped as Gemma-3-270M is (one KV head, head_dim past hidden / heads), with six
 * layers (five local, one global) and a window of 8, so a test's prompt runs past it.
 */
const tinyGemma3: LlamaShape = {
  ...tinyQwen2,
  architecture: 'gemma3',
  numLayers: 6,
  numKvHeads: 1,
  headDim: 32,
  slidingWindow: 8,
};

/** Qwen2.5-0.5B's shapes (its 151,936-entry vocabulary, tied; context cut to 8192): 494M parameters. */
const benchQwen2: LlamaShape = {
  architecture: 'qwen2',
  hiddenSize: 896,
  intermediateSize: 4864,
  numLayers: 24,
  numHeads: 14,
  numKvHeads: 2,
  headDim: 64,
  vocabSize: 151936,
  maxPositionEmbeddings: 8192,
  tieWordEmbeddings: true,
  rmsNormEps: 1e-6,
  ropeTheta: 1_000_000,
};

/** Qwen3-0.6B's shapes (head_dim 128 of hidden 1024 over 16 heads): 596M parameters. */
const benchQwen3: LlamaShape = {
  ...benchQwen2,
  architecture: 'qwen3',
  hiddenSize: 1024,
  intermediateSize: 3072,
  numLayers: 28,
  numHeads: 16,
  numKvHeads: 8,
  headDim: 128,
};

/** Gemma-3-270M's shapes (a 262,144-entry vocabulary, head_dim 256, one KV head, window 512): 268M parameters. */
const benchGemma3: LlamaShape = {
  architecture: 'gemma3',
  hiddenSize: 640,
  intermediateSize: 2048,
  numLayers: 18,
  numHeads: 4,
  numKvHeads: 1,
  headDim: 256,
  vocabSize: 262144,
  maxPositionEmbeddings: 8192,
  tieWordEmbeddings: true,
  rmsNormEps: 1e-6,
  ropeTheta: 1_000_000,
  slidingWindow: 512,
};

export const PRESETS: Record<PresetName, LlamaShape> = {
  tiny,
  'tiny-untied': { ...tiny, tieWordEmbeddings: false },
  // A draft model for speculative decoding, distilled by construction: every tensor is seeded by its name,
  // so with the same seed this is exactly tiny's embedding, first layer, final norm and output projection.
  'tiny-draft': { ...tiny, numLayers: 1 },
  'tiny-copy': tiny,
  'tiny-256': tiny256,
  'bench-135m': bench135m,
  'bench-135m-copy': bench135m,
  'bench-360m': bench360m,
  'bench-1b': bench1b,
  'tiny-qwen2': tinyQwen2,
  'tiny-qwen3': tinyQwen3,
  'tiny-gemma3': tinyGemma3,
  'bench-qwen2-0.5b': benchQwen2,
  'bench-qwen3-0.6b': benchQwen3,
  'bench-gemma3-270m': benchGemma3,
};

export const BOS_TOKEN_ID = 1; // <|im_start|>
export const EOS_TOKEN_ID = 2; // <|im_end|>
export const ENDOFTEXT_TOKEN_ID = 0; // <|endoftext|>

export function isPresetName(s: string): s is PresetName {
  return (PRESET_NAMES as readonly string[]).includes(s);
}

/** What config.json says differently per architecture (Qwen2Config and Qwen3Config beside LlamaConfig). */
const ARCHITECTURE_KEYS: Record<Architecture, Record<string, unknown>> = {
  llama: { architectures: ['LlamaForCausalLM'], attention_bias: false, mlp_bias: false, model_type: 'llama' },
  // Qwen2's q/k/v biases are not a key: Qwen2Config has no attention_bias, the model always has them.
  qwen2: {
    architectures: ['Qwen2ForCausalLM'],
    model_type: 'qwen2',
    sliding_window: null,
    use_sliding_window: false,
  },
  qwen3: {
    architectures: ['Qwen3ForCausalLM'],
    attention_bias: false,
    model_type: 'qwen3',
    sliding_window: null,
    use_sliding_window: false,
  },
  // Gemma3TextConfig's keys (sliding_window and layer_types are the shape's: gemmaKeys).
  gemma3: {
    architectures: ['Gemma3ForCausalLM'],
    attention_bias: false,
    attn_logit_softcapping: null,
    final_logit_softcapping: null,
    hidden_act: undefined,
    hidden_activation: 'gelu_pytorch_tanh',
    model_type: 'gemma3_text',
    rope_local_base_freq: LOCAL_ROPE_THETA,
    sliding_window_pattern: SLIDING_PATTERN,
  },
};

/** A Gemma 3 shape's own keys: its window, the query scale (head_dim, as Gemma-3-270M's), each layer's type. */
function gemmaKeys(p: LlamaShape): Record<string, unknown> {
  if (p.architecture !== 'gemma3') return {};
  return {
    layer_types: Array.from({ length: p.numLayers }, (_, i) =>
      (i + 1) % SLIDING_PATTERN === 0 ? 'full_attention' : 'sliding_attention',
    ),
    query_pre_attn_scalar: p.headDim,
    sliding_window: p.slidingWindow,
  };
}

/**
 * A Llama-family config.json, the one builder of it (model:make, the safetensors and llama2.c imports, the GGUF
 * import): the keys of the shape's architecture's config class in alphabetical order (insertion order is the
 * serialisation order). `overrides` replace or add keys; an undefined one is left out.
 */
export function llamaConfigJson(p: LlamaShape, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const config: Record<string, unknown> = {
    bos_token_id: BOS_TOKEN_ID,
    eos_token_id: EOS_TOKEN_ID,
    head_dim: p.headDim,
    hidden_act: 'silu',
    hidden_size: p.hiddenSize,
    intermediate_size: p.intermediateSize,
    max_position_embeddings: p.maxPositionEmbeddings,
    num_attention_heads: p.numHeads,
    num_hidden_layers: p.numLayers,
    num_key_value_heads: p.numKvHeads,
    rms_norm_eps: p.rmsNormEps,
    rope_scaling: null,
    rope_theta: p.ropeTheta,
    tie_word_embeddings: p.tieWordEmbeddings,
    torch_dtype: 'float32',
    transformers_version: '4.46.0',
    use_cache: true,
    vocab_size: p.vocabSize,
    ...ARCHITECTURE_KEYS[p.architecture ?? 'llama'],
    ...gemmaKeys(p),
    ...overrides,
  };
  const keys = Object.keys(config).filter((k) => config[k] !== undefined);
  return Object.fromEntries(keys.sort().map((k) => [k, config[k]]));
}

export function generationConfigJson(p: LlamaShape): Record<string, unknown> {
  return {
    bos_token_id: BOS_TOKEN_ID,
    do_sample: false,
    eos_token_id: [EOS_TOKEN_ID, ENDOFTEXT_TOKEN_ID],
    max_length: p.maxPositionEmbeddings,
    transformers_version: '4.46.0',
  };
}

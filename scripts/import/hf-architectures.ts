// config.json of the architectures the kernels run beyond Llama (Qwen2, Qwen3, text-only Gemma 3) -> the shape
// the GGUF writer takes. Keys are read as transformers' config classes read them: a key config.json leaves out
// takes the class's default (Qwen2Config, Qwen3Config, Gemma3TextConfig), so Gemma's embeddings are tied unless
// it says otherwise, and Qwen2's head_dim is hidden / heads. What the kernels do not compute, or a GGUF file
// cannot state (llama.cpp fixes Gemma 3's layer pattern, local RoPE base and query scale), is refused by name.
import { LOCAL_ROPE_THETA, SLIDING_PATTERN, type Architecture, type LlamaShape } from '../model/presets.js';

type Json = Record<string, unknown>;

/** config.json model_type -> the GGUF architecture it is written as (convert_hf_to_gguf.py's names). */
export const GGUF_MODEL_TYPES: Readonly<Record<string, Architecture>> = {
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  gemma3_text: 'gemma3',
};

export const isGgufModelType = (type: unknown): type is string =>
  typeof type === 'string' && Object.hasOwn(GGUF_MODEL_TYPES, type);

/** Relatives of these that a folder may well be, refused with the reason. */
export const REFUSED_RELATIVES: Readonly<Record<string, string>> = {
  qwen2_moe: 'a mixture of experts (Qwen2MoeForCausalLM); the kernels run dense MLPs',
  qwen3_moe: 'a mixture of experts (Qwen3MoeForCausalLM); the kernels run dense MLPs',
  gemma3:
    "Gemma 3's multimodal checkpoint (Gemma3ForConditionalGeneration: a vision tower beside the text model, " +
    'whose weights lie under language_model, and linear rope_scaling on its global layers); ' +
    'text-only Gemma 3 (model_type gemma3_text: gemma-3-270m, gemma-3-1b) is imported',
};

/** Qwen2Config's defaults for the keys read here (transformers 4.5x); Qwen3Config's are these and head_dim 128. */
const QWEN_DEFAULTS: Json = {
  hidden_size: 4096,
  intermediate_size: 22016,
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 32,
  vocab_size: 151936,
  max_position_embeddings: 32768,
  hidden_act: 'silu',
  rms_norm_eps: 1e-6,
  rope_theta: 10000,
  tie_word_embeddings: false,
};

/** The config classes' defaults for the keys read here (transformers 4.5x). */
const DEFAULTS: Record<string, Json> = {
  qwen2: QWEN_DEFAULTS,
  qwen3: { ...QWEN_DEFAULTS, head_dim: 128 },
  gemma3_text: {
    hidden_size: 2304,
    intermediate_size: 9216,
    num_hidden_layers: 26,
    num_attention_heads: 8,
    num_key_value_heads: 4,
    head_dim: 256,
    vocab_size: 262208,
    max_position_embeddings: 131072,
    hidden_activation: 'gelu_pytorch_tanh',
    rms_norm_eps: 1e-6,
    rope_theta: 1_000_000,
    tie_word_embeddings: true,
    query_pre_attn_scalar: 256,
    sliding_window: 4096,
    rope_local_base_freq: 10000,
  },
};

/** The shape of a qwen2, qwen3 or gemma3_text config.json, or a refusal naming what cannot be imported. */
export function ggufShapeFromHfConfig(config: Json): LlamaShape {
  const type = config.model_type;
  if (!isGgufModelType(type)) throw new Error(`config.json: model_type ${JSON.stringify(type)} is not written as GGUF`);
  const get = (key: string): unknown => (config[key] === undefined ? DEFAULTS[type][key] : config[key]);
  const refuse = (why: string): never => {
    throw new Error(`config.json: ${why}; a ${type} checkpoint is imported for the kernels, which do not compute that`);
  };
  const int = (key: string): number => {
    const v = get(key);
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0)
      throw new Error(`config.json: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
    return v;
  };
  const num = (key: string): number => {
    const v = get(key);
    if (typeof v !== 'number' || !(v > 0)) throw new Error(`config.json: ${key} must be a positive number`);
    return v;
  };
  const unset = (key: string) => {
    if (get(key) !== undefined && get(key) !== null) refuse(`${key} ${JSON.stringify(get(key))} is set`);
  };

  const scaling = get('rope_scaling') as Json | null | undefined;
  // transformers reads a rope_type (or type) "default" as no scaling at all.
  if (scaling && (scaling.rope_type ?? scaling.type) !== 'default')
    refuse(`rope_scaling ${JSON.stringify(scaling)} is set`);
  if (get('attention_bias') === true) refuse('attention_bias is true (an o_proj bias too)');
  const layerTypes = get('layer_types');
  const numLayers = int('num_hidden_layers');
  const hiddenSize = int('hidden_size');
  const numHeads = int('num_attention_heads');
  // null (not absent) means one KV head per head, as the config classes read it.
  const numKvHeads = get('num_key_value_heads') === null ? numHeads : int('num_key_value_heads');
  // Qwen2Config has no head_dim; its attention takes one where config.json gives it.
  const headDim = get('head_dim') === undefined || get('head_dim') === null ? hiddenSize / numHeads : int('head_dim');
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) refuse(`head_dim ${headDim} is not an even integer`);
  if (numHeads % numKvHeads !== 0)
    refuse(`num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);

  let slidingWindow: number | undefined;
  if (type === 'gemma3_text') {
    if (get('hidden_activation') !== 'gelu_pytorch_tanh')
      refuse(`hidden_activation ${JSON.stringify(get('hidden_activation'))} is not gelu_pytorch_tanh`);
    unset('final_logit_softcapping');
    unset('attn_logit_softcapping');
    if (get('use_bidirectional_attention') === true) refuse('use_bidirectional_attention is true (EmbeddingGemma)');
    // A gemma3 GGUF states the window only: llama.cpp takes every sixth layer as global, the local layers' RoPE
    // base as 10000 and q . k's scale as head_dim^-1/2 (the config writes them back from those: gemmaKeys).
    const pattern = Array.from({ length: numLayers }, (_, i) =>
      (i + 1) % SLIDING_PATTERN === 0 ? 'full_attention' : 'sliding_attention',
    );
    const once = `every ${SLIDING_PATTERN}th layer global, the one pattern a gemma3 GGUF file has`;
    // Without layer_types (transformers before 4.53) the pattern key says which layers are global.
    const every = get('sliding_window_pattern') ?? get('_sliding_window_pattern') ?? SLIDING_PATTERN;
    if (Array.isArray(layerTypes) && layerTypes.join() !== pattern.join())
      refuse(`layer_types ${JSON.stringify(layerTypes)} is not ${once}`);
    if (!Array.isArray(layerTypes) && every !== SLIDING_PATTERN)
      refuse(`sliding_window_pattern ${every} is not ${once}`);
    if (num('rope_local_base_freq') !== LOCAL_ROPE_THETA)
      refuse(
        `rope_local_base_freq ${get('rope_local_base_freq')} is not ${LOCAL_ROPE_THETA}, which a gemma3 GGUF file implies`,
      );
    if (num('query_pre_attn_scalar') !== headDim)
      refuse(
        `query_pre_attn_scalar ${get('query_pre_attn_scalar')} is not head_dim ${headDim}, which a gemma3 GGUF file implies`,
      );
    slidingWindow = int('sliding_window');
  } else {
    if (get('hidden_act') !== 'silu') refuse(`hidden_act ${JSON.stringify(get('hidden_act'))} is not silu`);
    // Qwen's sliding window applies only where use_sliding_window says so (Qwen2.5 writes one and sets it false).
    if (get('use_sliding_window') === true)
      refuse(`use_sliding_window is true (sliding_window ${get('sliding_window')})`);
    if (Array.isArray(layerTypes) && layerTypes.some((t) => t !== 'full_attention'))
      refuse(`layer_types ${JSON.stringify(layerTypes)} has sliding layers`);
  }
  return {
    architecture: GGUF_MODEL_TYPES[type],
    ...(slidingWindow !== undefined && { slidingWindow }),
    hiddenSize,
    intermediateSize: int('intermediate_size'),
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: int('vocab_size'),
    maxPositionEmbeddings: int('max_position_embeddings'),
    tieWordEmbeddings: get('tie_word_embeddings') === true,
    rmsNormEps: num('rms_norm_eps'),
    ropeTheta: num('rope_theta'),
  };
}

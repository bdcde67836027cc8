import { kvRowBytes, type KvDtype } from '../kv/kv-dtype.js';
import { InvalidRequestError } from '../errors.js';

/** The parts of a Hugging Face Llama `config.json` the engine needs, in engine spelling. */
export interface ModelConfig {
  /** config.json model_type: what a layer computes beyond a Llama layer's (qwen2: q/k/v biases; qwen3: q/k norms). */
  modelType: string;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  /** Context window: prompt + completion may not exceed it. */
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean;
  /** Token ids that end a generation (config's and generation_config's eos ids, merged). */
  eosTokenIds: number[];
  bosTokenId: number | undefined;
  /** RMSNorm epsilon (Hugging Face's LlamaConfig default when config.json leaves it out). */
  rmsNormEps: number;
  /** RoPE base (config.json rope_theta; Hugging Face's default 10000). */
  ropeTheta: number;
  /** config.json rope_scaling, for runners that compute RoPE themselves; `other` names a kind they may refuse. */
  ropeScaling?: RopeScaling;
  /** config.json intermediate_size (the MLP's width), where it says: what a layer's weights are sized by before they are read. */
  intermediateSize?: number;
  /** The MLP's gate: SwiGLU (Llama, Qwen) or GeGLU with PyTorch's tanh GELU (Gemma: gelu_pytorch_tanh). */
  hiddenAct: 'silu' | 'gelu_tanh';
  /** q . k is scaled by this: 1 / sqrt(query_pre_attn_scalar) where config.json gives one (Gemma), else 1 / sqrt(head_dim). */
  attentionScale: number;
  /** Embedding rows are multiplied by this before the first layer: sqrt(hidden) for Gemma, else 1. */
  embeddingScale: number;
  /**
   * Gemma 3's local layers: `layers[i]` says whether layer i attends to the last `size` positions only (its
   * RoPE base then `ropeTheta`, config.json rope_local_base_freq); the others attend to every position.
   */
  slidingWindow?: { size: number; layers: boolean[]; ropeTheta: number };
}

export type RopeScaling =
  | { type: 'linear'; factor: number }
  | {
      type: 'llama3';
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    }
  | { type: 'other'; name: string };

function ropeScaling(raw: unknown): RopeScaling | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const r = raw as Json;
  const type = String(r.rope_type ?? r.type ?? '');
  const num = (key: string, fallback: number): number => (typeof r[key] === 'number' ? (r[key] as number) : fallback);
  if (type === 'default' || type === '') return undefined;
  if (type === 'linear') return { type, factor: num('factor', 1) };
  if (type === 'llama3')
    return {
      type,
      factor: num('factor', 8),
      lowFreqFactor: num('low_freq_factor', 1),
      highFreqFactor: num('high_freq_factor', 4),
      originalMaxPositionEmbeddings: num('original_max_position_embeddings', 8192),
    };
  return { type: 'other', name: type };
}

type Json = Record<string, unknown>;

function positiveInt(json: Json, key: string): number {
  const v = json[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) {
    throw new InvalidRequestError('config', `config.json: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
  }
  return v;
}

function idList(v: unknown): number[] {
  if (typeof v === 'number') return [v];
  if (Array.isArray(v)) return v.filter((x): x is number => typeof x === 'number');
  return [];
}

/**
 * Decoder-only architectures whose Hugging Face ONNX exports the runner can feed: the engine runs the
 * graph as it is, so what matters is the KV cache (one key and one value per layer, shaped
 * (batch, num_key_value_heads, past, head_dim)) and a config.json that states those sizes. Others
 * (sliding-window caches, recurrent state, encoder-decoders) are refused by name.
 */
export const SUPPORTED_MODEL_TYPES: readonly string[] = [
  'llama',
  'mistral',
  'qwen2',
  'qwen3',
  'phi3',
  'gemma',
  'gemma3_text',
  'granite',
];

/**
 * Gemma 3's sliding layers from config.json: `layer_types` where given (transformers 4.53 on), else every
 * `sliding_window_pattern`-th layer (default 6) is global and the rest slide.
 */
function slidingWindow(config: Json, numLayers: number): ModelConfig['slidingWindow'] {
  if (config.model_type !== 'gemma3_text' || typeof config.sliding_window !== 'number') return undefined;
  const types = Array.isArray(config.layer_types) ? config.layer_types : undefined;
  const pattern = typeof config.sliding_window_pattern === 'number' ? config.sliding_window_pattern : 6;
  if (types && types.length !== numLayers)
    throw new InvalidRequestError(
      'config',
      `config.json: layer_types has ${types.length} entries for ${numLayers} layers`,
    );
  return {
    size: positiveInt(config, 'sliding_window'),
    layers: Array.from({ length: numLayers }, (_, i) =>
      types ? types[i] === 'sliding_attention' : (i + 1) % pattern !== 0,
    ),
    ropeTheta: typeof config.rope_local_base_freq === 'number' ? config.rope_local_base_freq : 10000,
  };
}

/** Reads `config.json` (and optionally `generation_config.json`) into a ModelConfig. */
export function parseModelConfig(config: Json, generationConfig: Json = {}): ModelConfig {
  if (typeof config.model_type !== 'string' || !SUPPORTED_MODEL_TYPES.includes(config.model_type)) {
    throw new InvalidRequestError(
      'model',
      `config.json: model_type ${JSON.stringify(config.model_type)} is not supported; the engine serves ${SUPPORTED_MODEL_TYPES.join(', ')}`,
      'unsupported_model',
    );
  }
  if (
    typeof config.sliding_window === 'number' &&
    config.model_type !== 'gemma3_text' &&
    config.use_sliding_window !== false &&
    config.sliding_window < positiveInt(config, 'max_position_embeddings')
  ) {
    throw new InvalidRequestError(
      'model',
      `config.json: sliding_window ${config.sliding_window} is shorter than the context (${config.max_position_embeddings}); the paged KV cache keeps every position`,
      'unsupported_model',
    );
  }
  const hiddenSize = positiveInt(config, 'hidden_size');
  const numHeads = positiveInt(config, 'num_attention_heads');
  const numKvHeads = config.num_key_value_heads === undefined ? numHeads : positiveInt(config, 'num_key_value_heads');
  const headDim = config.head_dim === undefined ? hiddenSize / numHeads : positiveInt(config, 'head_dim');
  const eos = [...new Set([...idList(config.eos_token_id), ...idList(generationConfig.eos_token_id)])];
  const numLayers = positiveInt(config, 'num_hidden_layers');
  const act = config.hidden_activation ?? config.hidden_act;
  const window = slidingWindow(config, numLayers);
  return {
    modelType: config.model_type,
    hiddenSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: positiveInt(config, 'vocab_size'),
    maxPositionEmbeddings: positiveInt(config, 'max_position_embeddings'),
    // Hugging Face's LlamaConfig default: untied unless config.json says tied.
    tieWordEmbeddings: config.tie_word_embeddings === true,
    eosTokenIds: eos,
    bosTokenId: typeof config.bos_token_id === 'number' ? config.bos_token_id : undefined,
    rmsNormEps: typeof config.rms_norm_eps === 'number' && config.rms_norm_eps > 0 ? config.rms_norm_eps : 1e-6,
    ropeTheta: typeof config.rope_theta === 'number' && config.rope_theta > 0 ? config.rope_theta : 10000,
    ropeScaling: ropeScaling(config.rope_scaling),
    ...(typeof config.intermediate_size === 'number' && config.intermediate_size > 0
      ? { intermediateSize: config.intermediate_size }
      : {}),
    hiddenAct: act === 'gelu_pytorch_tanh' || act === 'gelu_tanh' ? 'gelu_tanh' : 'silu',
    attentionScale:
      1 / Math.sqrt(typeof config.query_pre_attn_scalar === 'number' ? config.query_pre_attn_scalar : headDim),
    embeddingScale: config.model_type === 'gemma3_text' ? Math.sqrt(hiddenSize) : 1,
    ...(window ? { slidingWindow: window } : {}),
  };
}

/** Blocks of a KV pool of `kvCacheBytes` (every layer's keys and values, at `kvDtype`). */
export function kvPoolBlocks(config: ModelConfig, kvCacheBytes: number, blockSize: number, kvDtype: KvDtype): number {
  return Math.floor(kvCacheBytes / (blockSize * kvBytesPerToken(config, kvDtype)));
}

/** Bytes one token occupies in the KV cache: keys and values, every layer, every KV head, at `kvDtype`. */
export function kvBytesPerToken(
  config: Pick<ModelConfig, 'numLayers' | 'numKvHeads' | 'headDim'>,
  kvDtype: KvDtype = 'fp32',
): number {
  return 2 * config.numLayers * config.numKvHeads * kvRowBytes(config.headDim, kvDtype);
}

import { InvalidRequestError } from '../errors.js';

/** The parts of a Hugging Face Llama `config.json` the engine needs, in engine spelling. */
export interface ModelConfig {
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

/** Reads `config.json` (and optionally `generation_config.json`) into a ModelConfig. */
export function parseModelConfig(config: Json, generationConfig: Json = {}): ModelConfig {
  if (config.model_type !== 'llama') {
    throw new InvalidRequestError('config', `unsupported model_type ${JSON.stringify(config.model_type)}; expected "llama"`);
  }
  const hiddenSize = positiveInt(config, 'hidden_size');
  const numHeads = positiveInt(config, 'num_attention_heads');
  const numKvHeads = config.num_key_value_heads === undefined ? numHeads : positiveInt(config, 'num_key_value_heads');
  const headDim = config.head_dim === undefined ? hiddenSize / numHeads : positiveInt(config, 'head_dim');
  const eos = [...new Set([...idList(config.eos_token_id), ...idList(generationConfig.eos_token_id)])];
  return {
    hiddenSize,
    numLayers: positiveInt(config, 'num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: positiveInt(config, 'vocab_size'),
    maxPositionEmbeddings: positiveInt(config, 'max_position_embeddings'),
    tieWordEmbeddings: config.tie_word_embeddings !== false,
    eosTokenIds: eos,
    bosTokenId: typeof config.bos_token_id === 'number' ? config.bos_token_id : undefined,
  };
}

/** Bytes one token occupies in the KV cache: keys and values, every layer, every KV head. */
export function kvBytesPerToken(config: ModelConfig, bytesPerElement = 4): number {
  return 2 * config.numLayers * config.numKvHeads * config.headDim * bytesPerElement;
}

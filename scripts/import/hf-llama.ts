// A Hugging Face Llama-family checkpoint (config.json + safetensors) -> our shape and weights.
// HF stores nn.Linear weights as (out, in); our graph builder takes MatMul's (in, out), so every
// projection is transposed. Names are otherwise the same (the builder uses HF's names). HF's q/k
// rows are already in the rotate-half RoPE order the graph computes.
import type { LlamaShape } from '../model/presets.js';
import { GGUF_MODEL_TYPES, isGgufModelType, REFUSED_RELATIVES } from './hf-architectures.js';
import { weightSpecs, type WeightMap } from '../model/weights.js';
import { transpose } from './llama2c-checkpoint.js';
import type { SafetensorsCheckpoint } from './safetensors.js';

type Json = Record<string, unknown>;

/** Architectures whose math is exactly our graph (RMSNorm, RoPE, GQA, SwiGLU, no biases); hf-architectures.ts has the others. */
const IMPORTABLE = ['llama', 'mistral'];

function int(config: Json, key: string): number {
  const v = config[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0)
    throw new Error(`config.json: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

/** The graph shape of a config.json, or a clear refusal naming what our graph does not compute. */
export function shapeFromHfConfig(config: Json): LlamaShape {
  const type = config.model_type;
  if (isGgufModelType(type))
    throw new Error(`config.json: model_type ${type} is imported as a GGUF file (model-import.ts's runImportAsync)`);
  if (typeof type === 'string' && Object.hasOwn(REFUSED_RELATIVES, type))
    throw new Error(`config.json: model_type ${type} is ${REFUSED_RELATIVES[type]}`);
  if (typeof type !== 'string' || !IMPORTABLE.includes(type)) {
    const all = [...IMPORTABLE, ...Object.keys(GGUF_MODEL_TYPES)];
    throw new Error(
      `config.json: model_type ${JSON.stringify(type)} cannot be imported (importable: ${all.join(', ')}); for other architectures pull an ONNX export with model:pull`,
    );
  }
  const refuse = (why: string) => {
    throw new Error(`config.json: ${why}; the imported graph computes plain Llama (RMSNorm, RoPE, SwiGLU, no biases)`);
  };
  if (config.hidden_act !== undefined && config.hidden_act !== 'silu')
    refuse(`hidden_act ${JSON.stringify(config.hidden_act)} is not silu`);
  if (config.attention_bias === true) refuse('attention_bias is true');
  if (config.mlp_bias === true) refuse('mlp_bias is true');
  if (config.rope_scaling !== undefined && config.rope_scaling !== null)
    refuse(`rope_scaling ${JSON.stringify(config.rope_scaling)} is set`);
  if (
    type === 'mistral' &&
    typeof config.sliding_window === 'number' &&
    config.sliding_window < int(config, 'max_position_embeddings')
  ) {
    refuse(`sliding_window ${config.sliding_window} is shorter than the context`);
  }
  const hiddenSize = int(config, 'hidden_size');
  const numHeads = int(config, 'num_attention_heads');
  const numKvHeads =
    config.num_key_value_heads === undefined || config.num_key_value_heads === null
      ? numHeads
      : int(config, 'num_key_value_heads');
  const headDim =
    config.head_dim === undefined || config.head_dim === null ? hiddenSize / numHeads : int(config, 'head_dim');
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) refuse(`head_dim ${headDim} is not an even integer`);
  if (numHeads % numKvHeads !== 0)
    refuse(`num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  return {
    hiddenSize,
    intermediateSize: int(config, 'intermediate_size'),
    numLayers: int(config, 'num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: int(config, 'vocab_size'),
    maxPositionEmbeddings: int(config, 'max_position_embeddings'),
    tieWordEmbeddings: config.tie_word_embeddings === true,
    rmsNormEps: typeof config.rms_norm_eps === 'number' ? config.rms_norm_eps : 1e-6,
    ropeTheta: typeof config.rope_theta === 'number' ? config.rope_theta : 10000,
  };
}

/**
 * Every tensor a model of this shape has (weightSpecs: a Llama block's, and what the shape's architecture adds,
 * Qwen2's biases or Qwen3's and Gemma's norms), in our layout; checks each shape against the config, and
 * refuses a tensor the checkpoint holds beyond them (an o_proj bias, experts) rather than drop it unread.
 */
export function weightsFromHf(ckpt: SafetensorsCheckpoint, p: LlamaShape): WeightMap {
  const out: WeightMap = new Map();
  const load = (name: string, dims: number[]) => {
    const t = ckpt.tensor(name);
    if (t.dims.join(',') !== dims.join(','))
      throw new Error(`${name}: shape [${t.dims}] does not match config.json (expected [${dims}])`);
    return t.data;
  };
  if (!p.tieWordEmbeddings && !ckpt.has('lm_head.weight'))
    throw new Error('config.json says tie_word_embeddings is false, but the checkpoint has no lm_head.weight');
  for (const { name, dims } of weightSpecs(p)) {
    // Vectors and the embedding (a row per token) are stored as we hold them; nn.Linear's (out, in) is transposed.
    if (dims.length === 1 || name === 'model.embed_tokens.weight') out.set(name, { dims, data: load(name, dims) });
    else out.set(name, { dims, data: transpose(load(name, [dims[1], dims[0]]), dims[1], dims[0]) });
  }
  for (const name of ckpt.fileOf.keys()) {
    // transformers may save a tied lm_head anyway, and older Llama checkpoints their RoPE buffers.
    if (out.has(name) || name === 'lm_head.weight' || name.endsWith('.rotary_emb.inv_freq')) continue;
    throw new Error(
      `checkpoint tensor ${name} is not part of a ${p.architecture ?? 'llama'} model as config.json describes it; it would be dropped unread`,
    );
  }
  return out;
}

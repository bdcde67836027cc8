// A GGUF file's architecture metadata and tensor table -> config.json (the Hugging Face config class's keys
// for its architecture), after checking that the engine can serve it: architecture `llama`, `qwen2` or
// `qwen3`, the tensors such a block has with the shapes the metadata implies, and tensor types the loader
// reads. Anything else is refused by name.
import { GGML_TYPE, ggmlTypeName } from '../../src/engine/formats/gguf/ggml-types.js';
import type { GgufHeader } from '../../src/engine/formats/gguf/gguf-header.js';
import { ARCHITECTURES, llamaConfigJson, type Architecture } from '../model/presets.js';

/** Tensor types the kernels' GGUF loader takes. */
export const GGUF_LOADABLE_TYPES: readonly number[] = [
  GGML_TYPE.F32,
  GGML_TYPE.F16,
  GGML_TYPE.BF16,
  GGML_TYPE.Q8_0,
  GGML_TYPE.Q4_0,
  GGML_TYPE.Q4_1,
  GGML_TYPE.Q5_0,
  GGML_TYPE.Q5_1,
  GGML_TYPE.Q4_K,
  GGML_TYPE.Q5_K,
  GGML_TYPE.Q6_K,
];

const LAYER_TENSORS = [
  'attn_norm',
  'attn_q',
  'attn_k',
  'attn_v',
  'attn_output',
  'ffn_norm',
  'ffn_gate',
  'ffn_up',
  'ffn_down',
] as const;

/** The shortest decimal that reads back as the same float32 (1e-5, not 0.000009999999747378752). */
export function float32Decimal(v: number): number {
  for (let digits = 1; digits <= 9; digits++) {
    const d = Number(v.toPrecision(digits));
    if (Math.fround(d) === Math.fround(v)) return d;
  }
  return v;
}

export interface GgufLlamaShape {
  architecture: Architecture;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  contextLength: number;
  rmsNormEps: number;
  ropeTheta: number;
  tieWordEmbeddings: boolean;
  /** Gemma 3: its local layers' window (every sixth layer is global, as llama.cpp reads the file). */
  slidingWindow?: number;
}

const isArchitecture = (arch: string): arch is Architecture => (ARCHITECTURES as readonly string[]).includes(arch);

/** Reads and checks a Llama-family GGUF's shape from its metadata and tensor table. */
export function ggufLlamaShape(header: GgufHeader): GgufLlamaShape {
  const meta = header.metadata;
  const arch = meta.str('general.architecture');
  if (!isArchitecture(arch))
    throw new Error(`GGUF architecture ${arch} is not supported (${ARCHITECTURES.join(', ')} are)`);
  const k = (key: string) => `${arch}.${key}`;
  if (meta.u32(k('expert_count'), 0) > 0)
    throw new Error(`GGUF ${k('expert_count')} > 0: mixture-of-experts models are not supported`);
  const scaling = meta.str(k('rope.scaling.type'), 'none');
  if (scaling !== 'none') throw new Error(`GGUF ${k('rope.scaling.type')} ${scaling} is not supported`);

  const hiddenSize = meta.u32(k('embedding_length'));
  const numHeads = meta.u32(k('attention.head_count'));
  const numKvHeads = meta.u32(k('attention.head_count_kv'), numHeads);
  const headDim = meta.u32(k('attention.key_length'), hiddenSize / numHeads);
  if (!Number.isInteger(headDim))
    throw new Error(`GGUF ${k('embedding_length')} ${hiddenSize} is not a whole number of heads`);
  if (meta.u32(k('attention.value_length'), headDim) !== headDim)
    throw new Error(`GGUF ${k('attention.value_length')} differs from key_length: not supported`);
  if (meta.u32(k('rope.dimension_count'), headDim) !== headDim)
    throw new Error(
      `GGUF ${k('rope.dimension_count')} is not the head dimension: partial rotary embeddings are not supported`,
    );
  if (numKvHeads < 1 || numHeads % numKvHeads)
    throw new Error(`GGUF ${k('attention.head_count')} ${numHeads} is not a multiple of head_count_kv ${numKvHeads}`);

  const tensors = new Map(header.tensors.map((t) => [t.name, t]));
  const embedding = tensors.get('token_embd.weight');
  if (!embedding) throw new Error('GGUF tensor token_embd.weight is missing');
  const shape: GgufLlamaShape = {
    architecture: arch,
    hiddenSize,
    intermediateSize: meta.u32(k('feed_forward_length')),
    numLayers: meta.u32(k('block_count')),
    numHeads,
    numKvHeads,
    headDim,
    // The embedding's rows are the vocabulary the model has, whatever the tokenizer lists.
    vocabSize: embedding.ne[1],
    contextLength: meta.u32(k('context_length')),
    rmsNormEps: float32Decimal(meta.f32(k('attention.layer_norm_rms_epsilon'))),
    ropeTheta: float32Decimal(meta.f32(k('rope.freq_base'), 10000)),
    tieWordEmbeddings: !tensors.has('output.weight'),
    ...(arch === 'gemma3' && { slidingWindow: meta.u32(k('attention.sliding_window')) }),
  };
  checkTensors(header, shape);
  return shape;
}

/** Every tensor a model of this shape and architecture has, with its dims, and nothing else. */
function checkTensors(header: GgufHeader, p: GgufLlamaShape): void {
  const q = p.numHeads * p.headDim;
  const kv = p.numKvHeads * p.headDim;
  const want = new Map<string, number[]>([
    ['token_embd.weight', [p.hiddenSize, p.vocabSize]],
    ['output_norm.weight', [p.hiddenSize]],
  ]);
  if (!p.tieWordEmbeddings) want.set('output.weight', [p.hiddenSize, p.vocabSize]);
  const dims: Record<(typeof LAYER_TENSORS)[number], number[]> = {
    attn_norm: [p.hiddenSize],
    attn_q: [p.hiddenSize, q],
    attn_k: [p.hiddenSize, kv],
    attn_v: [p.hiddenSize, kv],
    attn_output: [q, p.hiddenSize],
    ffn_norm: [p.hiddenSize],
    ffn_gate: [p.hiddenSize, p.intermediateSize],
    ffn_up: [p.hiddenSize, p.intermediateSize],
    ffn_down: [p.intermediateSize, p.hiddenSize],
  };
  const extra: [string, number[]][] =
    p.architecture === 'qwen2'
      ? [
          ['attn_q.bias', [q]],
          ['attn_k.bias', [kv]],
          ['attn_v.bias', [kv]],
        ]
      : p.architecture === 'qwen3' || p.architecture === 'gemma3'
        ? [
            ['attn_q_norm.weight', [p.headDim]],
            ['attn_k_norm.weight', [p.headDim]],
            ...(p.architecture === 'gemma3'
              ? ([
                  ['post_attention_norm.weight', [p.hiddenSize]],
                  ['post_ffw_norm.weight', [p.hiddenSize]],
                ] as [string, number[]][])
              : []),
          ]
        : [];
  for (let i = 0; i < p.numLayers; i++) {
    for (const t of LAYER_TENSORS) want.set(`blk.${i}.${t}.weight`, dims[t]);
    for (const [t, d] of extra) want.set(`blk.${i}.${t}`, d);
  }
  for (const t of header.tensors) {
    const expected = want.get(t.name);
    if (!expected)
      throw new Error(
        `GGUF tensor ${t.name} is not part of a ${p.architecture} model the engine serves (rope_freqs, an o bias...)`,
      );
    if (t.ne.join() !== expected.join())
      throw new Error(`GGUF tensor ${t.name} has dims [${t.ne}], the metadata implies [${expected}]`);
    if (!GGUF_LOADABLE_TYPES.includes(t.type))
      throw new Error(
        `GGUF tensor ${t.name} is ${ggmlTypeName(t.type)}, which the loader does not read ` +
          `(it reads ${GGUF_LOADABLE_TYPES.map(ggmlTypeName).join(', ')})`,
      );
    want.delete(t.name);
  }
  if (want.size) throw new Error(`GGUF tensor ${[...want.keys()][0]} is missing`);
}

/** config.json for the folder: its architecture's config keys (presets.ts writes them), naming the GGUF file the weights are in. */
export function ggufConfigJson(
  p: GgufLlamaShape,
  bosId: number | null,
  eosId: number | number[] | null,
): Record<string, unknown> {
  return llamaConfigJson(
    { ...p, maxPositionEmbeddings: p.contextLength },
    {
      bos_token_id: bosId,
      eos_token_id: eosId,
      // transformers' own name for a checkpoint's GGUF file: the engine reads its weights from it by default.
      gguf_file: 'model.gguf',
      torch_dtype: undefined,
      transformers_version: undefined,
    },
  );
}

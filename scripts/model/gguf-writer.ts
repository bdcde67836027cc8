// Writes a generated Llama model as GGUF (llama.cpp's file format, version 3), so llama.cpp's WebAssembly
// build (@wllama/wllama) can run our models as a peer and the GGUF import has files to read.
//
//   npx tsx scripts/model/gguf-writer.ts --preset <tiny|tiny-256|...> --out file.gguf
//       [--type F32|F16|BF16|Q8_0|Q4_0|Q4_1|Q5_0|Q5_1|Q4_K|Q5_K|Q6_K|Q4_K_M] [--tokenizer gpt2|llama] [--seed N]
//
// Layout, as convert_hf_to_gguf.py writes a LlamaForCausalLM:
// - A matrix is stored in Hugging Face's (out, in) row-major order with ggml dims ne = [in, out]. Our
//   WeightMap holds MatMul layout (in, out), so every matrix but the embedding is transposed.
// - llama.cpp's `llama` architecture rotates adjacent pairs (x[2i], x[2i+1]) in RoPE, where HF rotates
//   halves (x[i], x[i + head_dim/2]). The converter permutes q_proj/k_proj output rows per head so the two
//   agree: new row 2i + j of a head is old row j * head_dim/2 + i. `qwen2` and `qwen3` run NEOX RoPE
//   (halves, as HF) and are written unpermuted, with their keys under their own prefix and their extra
//   tensors (Qwen2's q/k/v biases as blk.N.attn_q.bias..., Qwen3's blk.N.attn_q_norm.weight...) in F32.
//   `gemma3` likewise, with its post-norms (post_attention_norm, post_ffw_norm) and every norm's scale
//   written whole (HF's weight + 1, as the converter's norm_shift).
// - Types per tensor as llama-quantize chooses them (gguf-quant-mix.ts): a single type quantises every
//   matrix (the embedding too, like llama-quantize --pure); Q4_K_M is llama.cpp's mix. Norms stay F32.
// - Tokenizer (gguf-tokenizer-meta.ts): our byte-level BPE as llama.cpp's "gpt2" model, or a SentencePiece
//   vocabulary derived from it as its "llama" model.
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { makeCopyWeights } from './copy-weights.js';
import { ALIGNMENT, writeGguf, type GgufTensor, type MetaValue } from './gguf-file.js';
import { GGUF_FILE_TYPES, LLAMA_FTYPE, tensorTypeFor, type GgufFileType } from './gguf-quant-mix.js';
import {
  GGUF_TOKENIZERS,
  gpt2TokenizerMeta,
  llamaTokenizerMeta,
  type GgufTokenizerFlavour,
  type TokenizerJson,
} from './gguf-tokenizer-meta.js';
import { COPY_PERIOD, PRESETS, PRESET_NAMES, isPresetName, type LlamaShape, type PresetName } from './presets.js';
import { layerPrefix, makeWeights, type WeightMap } from './weights.js';
import { DEFAULT_SEED } from '../model-make.js';
import { answerHelp } from '../lib/help.js';
import { buildTokenizerFiles } from '../tokenizer/build-tokenizer.js';

export type { GgufFileType } from './gguf-quant-mix.js';
export type { TokenizerJson } from './gguf-tokenizer-meta.js';
/** The types the wllama bench compares (scripts/bench/wllama.ts). */
export type GgufType = 'F32' | 'Q8_0' | 'Q4_0';
export const GGUF_TYPES: readonly GgufType[] = ['F32', 'Q8_0', 'Q4_0'];

// ------------------------------------------------------------------------------------------------
// Llama mapping

/** (in, out) row-major -> (out, in) row-major. */
export function transpose(w: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(w.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = w[r * cols + c];
  return out;
}

/** convert_hf_to_gguf.py's permute(): per head, output row 2i + j takes row j * headDim/2 + i. */
export function permuteForRope(w: Float32Array, nHead: number, headDim: number, cols: number): Float32Array {
  const out = new Float32Array(w.length);
  const half = headDim / 2;
  for (let h = 0; h < nHead; h++) {
    for (let i = 0; i < half; i++) {
      for (let j = 0; j < 2; j++) {
        const src = (h * headDim + j * half + i) * cols;
        out.set(w.subarray(src, src + cols), (h * headDim + 2 * i + j) * cols);
      }
    }
  }
  return out;
}

export interface LlamaGgufInput {
  name: string;
  shape: LlamaShape;
  weights: WeightMap;
  tokenizer: TokenizerJson;
  chatTemplate?: string;
}

export interface LlamaGgufOptions {
  /** llama.cpp's tokenizer model in the metadata (default gpt2: our BPE as it is). */
  tokenizer?: GgufTokenizerFlavour;
  /**
   * A checkpoint's own tokenizer as metadata (gguf-tokenizer-hf.ts, its chat template included), in place of
   * the one made from `input.tokenizer`, whose special ids are our generated vocabulary's.
   */
  tokenizerMeta?: [string, MetaValue][];
  /** A Q8_0 / Q4_0 ... tensor whose rows are not whole blocks: F32 (default) or F16, as llama.cpp's converter writes it. */
  legacyFallback?: 'F32' | 'F16';
}

/** The GGUF tensors of a Llama model, each in the type llama-quantize would give it in a `fileType` file. */
export function llamaTensors(
  p: LlamaShape,
  weights: WeightMap,
  fileType: GgufFileType,
  legacyFallback?: 'F32' | 'F16',
): GgufTensor[] {
  const get = (name: string): { dims: number[]; data: Float32Array } => {
    const w = weights.get(name);
    if (!w) throw new Error(`missing weight ${name}`);
    return w;
  };
  const gemma = p.architecture === 'gemma3';
  // convert_hf_to_gguf.py's Gemma norm_shift: Hugging Face stores a Gemma norm's scale less one, GGUF the scale.
  const vector = (name: string, out: string): GgufTensor => ({
    name: out,
    ne: [get(name).data.length],
    type: 'F32',
    data: () => (gemma && name.endsWith('norm.weight') ? get(name).data.map((w) => w + 1) : get(name).data),
  });
  const mix = { numLayers: p.numLayers, tiedEmbeddings: p.tieWordEmbeddings, legacyFallback };
  const permuted = (p.architecture ?? 'llama') === 'llama';
  /** A MatMul (in, out) weight as an (out, in) ggml matrix, optionally with its rows permuted for RoPE. */
  const matrix = (name: string, out: string, ropeHeads?: number): GgufTensor => {
    const [nIn, nOut] = get(name).dims;
    return {
      name: out,
      ne: [nIn, nOut],
      type: tensorTypeFor(fileType, out, [nIn, nOut], mix),
      data: () => {
        const t = transpose(get(name).data, nIn, nOut);
        return ropeHeads === undefined || !permuted ? t : permuteForRope(t, ropeHeads, p.headDim, nIn);
      },
    };
  };
  const emb = get('model.embed_tokens.weight'); // already (vocab, hidden): an embedding is stored by row
  const tensors: GgufTensor[] = [
    {
      name: 'token_embd.weight',
      ne: [emb.dims[1], emb.dims[0]],
      type: tensorTypeFor(fileType, 'token_embd.weight', [emb.dims[1], emb.dims[0]], mix),
      data: () => emb.data,
    },
  ];
  for (let i = 0; i < p.numLayers; i++) {
    const l = layerPrefix(i);
    tensors.push(
      vector(`${l}.input_layernorm.weight`, `blk.${i}.attn_norm.weight`),
      matrix(`${l}.self_attn.q_proj.weight`, `blk.${i}.attn_q.weight`, p.numHeads),
      matrix(`${l}.self_attn.k_proj.weight`, `blk.${i}.attn_k.weight`, p.numKvHeads),
      matrix(`${l}.self_attn.v_proj.weight`, `blk.${i}.attn_v.weight`),
      matrix(`${l}.self_attn.o_proj.weight`, `blk.${i}.attn_output.weight`),
      ...architectureTensors(p).map(([hf, gguf]) => vector(`${l}.${hf}`, `blk.${i}.${gguf}`)),
      // Llama's post_attention_layernorm is the MLP's input norm; Gemma's normalises the attention's output.
      vector(`${l}.post_attention_layernorm.weight`, `blk.${i}.${gemma ? 'post_attention_norm' : 'ffn_norm'}.weight`),
      matrix(`${l}.mlp.gate_proj.weight`, `blk.${i}.ffn_gate.weight`),
      matrix(`${l}.mlp.up_proj.weight`, `blk.${i}.ffn_up.weight`),
      matrix(`${l}.mlp.down_proj.weight`, `blk.${i}.ffn_down.weight`),
    );
  }
  tensors.push(vector('model.norm.weight', 'output_norm.weight'));
  // Tied embeddings: llama.cpp falls back to token_embd when output.weight is absent.
  if (!p.tieWordEmbeddings) tensors.push(matrix('lm_head.weight', 'output.weight'));
  return tensors;
}

/** A layer's tensors beyond a Llama layer's: (Hugging Face name after the layer prefix, GGUF name after blk.N.). */
export function architectureTensors(p: LlamaShape): [string, string][] {
  if (p.architecture === 'qwen2') return ['q', 'k', 'v'].map((x) => [`self_attn.${x}_proj.bias`, `attn_${x}.bias`]);
  const qkNorms: [string, string][] = ['q', 'k'].map((x) => [`self_attn.${x}_norm.weight`, `attn_${x}_norm.weight`]);
  if (p.architecture === 'qwen3') return qkNorms;
  if (p.architecture === 'gemma3')
    return [
      ...qkNorms,
      ['pre_feedforward_layernorm.weight', 'ffn_norm.weight'],
      ['post_feedforward_layernorm.weight', 'post_ffw_norm.weight'],
    ];
  return [];
}

/** The metadata of a Llama-family GGUF, in the order convert_hf_to_gguf.py writes it. */
export function llamaGgufMeta(
  input: LlamaGgufInput,
  fileType: GgufFileType,
  options: LlamaGgufOptions = {},
): [string, MetaValue][] {
  const p = input.shape;
  const u32 = (value: number): MetaValue => ({ type: 'u32', value });
  const arch = p.architecture ?? 'llama';
  const meta: [string, MetaValue][] = [
    ['general.architecture', { type: 'str', value: arch }],
    ['general.name', { type: 'str', value: input.name }],
    ['general.file_type', u32(LLAMA_FTYPE[fileType])],
    ['general.alignment', u32(ALIGNMENT)],
    [`${arch}.vocab_size`, u32(p.vocabSize)],
    [`${arch}.context_length`, u32(p.maxPositionEmbeddings)],
    [`${arch}.embedding_length`, u32(p.hiddenSize)],
    [`${arch}.block_count`, u32(p.numLayers)],
    [`${arch}.feed_forward_length`, u32(p.intermediateSize)],
    [`${arch}.rope.dimension_count`, u32(p.headDim)],
    [`${arch}.rope.freq_base`, { type: 'f32', value: p.ropeTheta }],
    [`${arch}.attention.head_count`, u32(p.numHeads)],
    [`${arch}.attention.head_count_kv`, u32(p.numKvHeads)],
    [`${arch}.attention.key_length`, u32(p.headDim)],
    [`${arch}.attention.value_length`, u32(p.headDim)],
    [`${arch}.attention.layer_norm_rms_epsilon`, { type: 'f32', value: p.rmsNormEps }],
    ...(p.slidingWindow ? [[`${arch}.attention.sliding_window`, u32(p.slidingWindow)] as [string, MetaValue]] : []),
    ...(options.tokenizerMeta ??
      (options.tokenizer === 'llama' ? llamaTokenizerMeta : gpt2TokenizerMeta)(input.tokenizer, p.vocabSize)),
  ];
  if (input.chatTemplate && !options.tokenizerMeta)
    meta.push(['tokenizer.chat_template', { type: 'str', value: input.chatTemplate }]);
  return meta;
}

export function writeLlamaGguf(
  path: string,
  input: LlamaGgufInput,
  fileType: GgufFileType,
  options: LlamaGgufOptions = {},
): void {
  writeGguf(
    path,
    llamaGgufMeta(input, fileType, options),
    llamaTensors(input.shape, input.weights, fileType, options.legacyFallback),
  );
}

/** A preset's model as model-make.ts generates it (same seed => same weights as its ONNX files). */
export function presetGgufInput(preset: PresetName, seed: number): LlamaGgufInput {
  const shape = PRESETS[preset];
  const period = COPY_PERIOD[preset];
  const tok = buildTokenizerFiles({ vocabSize: shape.vocabSize, modelMaxLength: shape.maxPositionEmbeddings });
  return {
    name: preset,
    shape,
    weights: period === undefined ? makeWeights(shape, seed) : makeCopyWeights(shape, seed, period),
    tokenizer: tok.tokenizerJson as TokenizerJson,
    chatTemplate: (tok.tokenizerConfig as { chat_template?: string }).chat_template,
  };
}

const WRITER_USAGE = `Usage: npx tsx scripts/model/gguf-writer.ts --preset <${PRESET_NAMES.join('|')}> --out file.gguf
    [--type ${GGUF_FILE_TYPES.join('|')}] [--tokenizer ${GGUF_TOKENIZERS.join('|')}] [--seed N]
Writes a preset's random-weight model as a GGUF file (then: npm run model:import -- gguf file.gguf --out models/NAME).`;

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(WRITER_USAGE);
  const { values } = parseArgs({
    options: {
      preset: { type: 'string' },
      type: { type: 'string', default: 'F32' },
      tokenizer: { type: 'string', default: 'gpt2' },
      out: { type: 'string' },
      seed: { type: 'string', default: String(DEFAULT_SEED) },
    },
  });
  const { preset, type, tokenizer, out } = values;
  const fileType = GGUF_FILE_TYPES.find((t) => t === type);
  const flavour = GGUF_TOKENIZERS.find((t) => t === tokenizer);
  if (!preset || !isPresetName(preset) || !out || !fileType || !flavour) {
    console.error(WRITER_USAGE);
    process.exit(2);
  }
  writeLlamaGguf(out, presetGgufInput(preset, Number(values.seed)), fileType, { tokenizer: flavour });
  console.error(`wrote ${out}`);
}

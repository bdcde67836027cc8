// Writes a generated Llama model as GGUF (llama.cpp's file format, version 3) in F32, Q8_0 or Q4_0, so
// llama.cpp's WebAssembly build (@wllama/wllama) can run our bench models as a peer.
//
//   npx tsx scripts/model/gguf-writer.ts --preset <tiny|bench-135m|...> --type F32|Q8_0|Q4_0 --out file.gguf [--seed N]
//
// Layout, as convert_hf_to_gguf.py writes a LlamaForCausalLM:
// - A matrix is stored in Hugging Face's (out, in) row-major order with ggml dims ne = [in, out]. Our
//   WeightMap holds MatMul layout (in, out), so every matrix but the embedding is transposed.
// - llama.cpp's `llama` architecture rotates adjacent pairs (x[2i], x[2i+1]) in RoPE, where HF rotates
//   halves (x[i], x[i + head_dim/2]). The converter permutes q_proj/k_proj output rows per head so the two
//   agree: new row 2i + j of a head is old row j * head_dim/2 + i.
// - Quantised files quantise every matrix (the embedding too, like llama-quantize --pure) whose row length
//   is a multiple of 32, and keep the rest (and the norms) in F32.
// - Tokenizer: our byte-level BPE as llama.cpp's "gpt2" model with the GPT-2 pre-tokenizer regex (pre "gpt-2"); ids the
//   tokenizer does not fill up to vocab_size become [PAD<id>] tokens of type UNUSED, as the converter does.
import { closeSync, openSync, writeSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { makeCopyWeights } from './copy-weights.js';
import { QK, Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, quantizeQ4_0, quantizeQ8_0 } from './ggml-quants.js';
import {
  BOS_TOKEN_ID,
  COPY_PERIOD,
  ENDOFTEXT_TOKEN_ID,
  EOS_TOKEN_ID,
  PRESETS,
  isPresetName,
  type LlamaShape,
  type PresetName,
} from './presets.js';
import { layerPrefix, makeWeights, type WeightMap } from './weights.js';
import { DEFAULT_SEED } from '../model-make.js';
import { buildTokenizerFiles } from '../tokenizer/build-tokenizer.js';

export type GgufType = 'F32' | 'Q8_0' | 'Q4_0';
export const GGUF_TYPES: readonly GgufType[] = ['F32', 'Q8_0', 'Q4_0'];

/** ggml_type ids. */
const GGML_TYPE = { F32: 0, Q4_0: 2, Q8_0: 8 } as const;
/** llama_ftype ids for general.file_type. */
const FILE_TYPE: Record<GgufType, number> = { F32: 0, Q4_0: 2, Q8_0: 7 };
/** GGUF metadata value types. */
const V = { UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7, STRING: 8, ARRAY: 9 } as const;
/** llama.cpp token types (llama_token_type). */
const TOKEN_NORMAL = 1;
const TOKEN_CONTROL = 3;
const TOKEN_UNUSED = 5;
const ALIGNMENT = 32;

type MetaValue =
  | { type: 'u32' | 'i32' | 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'str'; value: string }
  | { type: 'str[]'; value: readonly string[] }
  | { type: 'i32[]'; value: readonly number[] };

/** The parts of tokenizer.json the metadata needs. */
export interface TokenizerJson {
  added_tokens: { id: number; content: string; special: boolean }[];
  model: { type: string; vocab: Record<string, number>; merges: (string | [string, string])[] };
}

export interface GgufTensor {
  name: string;
  /** ggml dims, fastest-varying first: [in, out] for a matrix. */
  ne: number[];
  type: GgufType;
  /** Row-major values of the (ne[1], ne[0]) matrix, or the vector. */
  data: () => Float32Array;
}

// ------------------------------------------------------------------------------------------------
// Byte encoding

class ByteSink {
  private chunks: Uint8Array[] = [];
  length = 0;
  private push(bytes: Uint8Array): void {
    this.chunks.push(bytes);
    this.length += bytes.length;
  }
  u32(v: number): void {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v, true);
    this.push(b);
  }
  i32(v: number): void {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setInt32(0, v, true);
    this.push(b);
  }
  u64(v: number): void {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(v), true);
    this.push(b);
  }
  f32(v: number): void {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, v, true);
    this.push(b);
  }
  u8(v: number): void {
    this.push(Uint8Array.of(v));
  }
  str(s: string): void {
    const bytes = new TextEncoder().encode(s);
    this.u64(bytes.length);
    this.push(bytes);
  }
  pad(alignment: number): void {
    const n = (alignment - (this.length % alignment)) % alignment;
    if (n) this.push(new Uint8Array(n));
  }
  bytes(): Uint8Array {
    const out = new Uint8Array(this.length);
    let o = 0;
    for (const c of this.chunks) {
      out.set(c, o);
      o += c.length;
    }
    return out;
  }
}

function writeMeta(sink: ByteSink, key: string, m: MetaValue): void {
  sink.str(key);
  switch (m.type) {
    case 'u32':
      sink.u32(V.UINT32);
      sink.u32(m.value);
      break;
    case 'i32':
      sink.u32(V.INT32);
      sink.i32(m.value);
      break;
    case 'f32':
      sink.u32(V.FLOAT32);
      sink.f32(m.value);
      break;
    case 'bool':
      sink.u32(V.BOOL);
      sink.u8(m.value ? 1 : 0);
      break;
    case 'str':
      sink.u32(V.STRING);
      sink.str(m.value);
      break;
    case 'str[]':
    case 'i32[]':
      sink.u32(V.ARRAY);
      sink.u32(m.type === 'str[]' ? V.STRING : V.INT32);
      sink.u64(m.value.length);
      if (m.type === 'str[]') for (const s of m.value) sink.str(s);
      else for (const v of m.value) sink.i32(v);
      break;
  }
}

export function tensorBytes(t: Pick<GgufTensor, 'ne' | 'type'>): number {
  const n = t.ne.reduce((a, b) => a * b, 1);
  if (t.type === 'F32') return 4 * n;
  return (n / QK) * (t.type === 'Q8_0' ? Q8_0_BLOCK_BYTES : Q4_0_BLOCK_BYTES);
}

function encodeTensor(t: GgufTensor): Uint8Array {
  const data = t.data();
  if (data.length !== t.ne.reduce((a, b) => a * b, 1))
    throw new Error(`${t.name}: ${data.length} values for dims ${t.ne}`);
  if (t.type === 'F32') return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(tensorBytes(t));
  // Blocks run along ne0 and ne0 is a multiple of 32, so the whole tensor quantises as one long row.
  (t.type === 'Q8_0' ? quantizeQ8_0 : quantizeQ4_0)(data, out);
  return out;
}

/** Writes a GGUF v3 file; tensors are encoded one at a time so peak memory is about one tensor. */
export function writeGguf(path: string, meta: [string, MetaValue][], tensors: GgufTensor[]): void {
  const head = new ByteSink();
  head.u32(0x46554747); // "GGUF"
  head.u32(3);
  head.u64(tensors.length);
  head.u64(meta.length);
  for (const [key, value] of meta) writeMeta(head, key, value);
  let offset = 0;
  for (const t of tensors) {
    if (t.type !== 'F32' && t.ne[0] % QK) throw new Error(`${t.name}: rows of ${t.ne[0]} cannot be ${t.type} blocks`);
    head.str(t.name);
    head.u32(t.ne.length);
    for (const n of t.ne) head.u64(n);
    head.u32(GGML_TYPE[t.type]);
    head.u64(offset);
    offset += Math.ceil(tensorBytes(t) / ALIGNMENT) * ALIGNMENT;
  }
  head.pad(ALIGNMENT);
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, head.bytes());
    for (const t of tensors) {
      const bytes = encodeTensor(t);
      writeSync(fd, bytes);
      const pad = (ALIGNMENT - (bytes.length % ALIGNMENT)) % ALIGNMENT;
      if (pad) writeSync(fd, new Uint8Array(pad));
    }
  } finally {
    closeSync(fd);
  }
}

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

function tokenizerMeta(tok: TokenizerJson, vocabSize: number): [string, MetaValue][] {
  if (tok.model.type !== 'BPE') throw new Error(`tokenizer model ${tok.model.type}: only byte-level BPE is written`);
  const tokens: string[] = Array.from({ length: vocabSize }, (_, id) => `[PAD${id}]`);
  const types: number[] = new Array(vocabSize).fill(TOKEN_UNUSED);
  const put = (id: number, text: string, type: number): void => {
    if (id >= vocabSize) throw new Error(`token id ${id} is past vocab_size ${vocabSize}`);
    tokens[id] = text;
    types[id] = type;
  };
  for (const [text, id] of Object.entries(tok.model.vocab)) put(id, text, TOKEN_NORMAL);
  for (const t of tok.added_tokens) put(t.id, t.content, t.special ? TOKEN_CONTROL : TOKEN_NORMAL);
  const merges = tok.model.merges.map((m) => (typeof m === 'string' ? m : m.join(' ')));
  return [
    ['tokenizer.ggml.model', { type: 'str', value: 'gpt2' }],
    ['tokenizer.ggml.pre', { type: 'str', value: 'gpt-2' }],
    ['tokenizer.ggml.tokens', { type: 'str[]', value: tokens }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: types }],
    ['tokenizer.ggml.merges', { type: 'str[]', value: merges }],
    ['tokenizer.ggml.bos_token_id', { type: 'u32', value: BOS_TOKEN_ID }],
    ['tokenizer.ggml.eos_token_id', { type: 'u32', value: EOS_TOKEN_ID }],
    ['tokenizer.ggml.padding_token_id', { type: 'u32', value: ENDOFTEXT_TOKEN_ID }],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: false }],
    ['tokenizer.ggml.add_eos_token', { type: 'bool', value: false }],
  ];
}

export interface LlamaGgufInput {
  name: string;
  shape: LlamaShape;
  weights: WeightMap;
  tokenizer: TokenizerJson;
  chatTemplate?: string;
}

/** The GGUF tensors of a Llama model; matrices whose rows cannot be blocked stay F32. */
export function llamaTensors(p: LlamaShape, weights: WeightMap, type: GgufType): GgufTensor[] {
  const get = (name: string): { dims: number[]; data: Float32Array } => {
    const w = weights.get(name);
    if (!w) throw new Error(`missing weight ${name}`);
    return w;
  };
  const vector = (name: string, out: string): GgufTensor => ({
    name: out,
    ne: [get(name).data.length],
    type: 'F32',
    data: () => get(name).data,
  });
  /** A MatMul (in, out) weight as an (out, in) ggml matrix, optionally with its rows permuted for RoPE. */
  const matrix = (name: string, out: string, ropeHeads?: number): GgufTensor => {
    const [nIn, nOut] = get(name).dims;
    return {
      name: out,
      ne: [nIn, nOut],
      type: type !== 'F32' && nIn % QK === 0 ? type : 'F32',
      data: () => {
        const t = transpose(get(name).data, nIn, nOut);
        return ropeHeads === undefined ? t : permuteForRope(t, ropeHeads, p.headDim, nIn);
      },
    };
  };
  const emb = get('model.embed_tokens.weight'); // already (vocab, hidden): an embedding is stored by row
  const tensors: GgufTensor[] = [
    {
      name: 'token_embd.weight',
      ne: [emb.dims[1], emb.dims[0]],
      type: type !== 'F32' && emb.dims[1] % QK === 0 ? type : 'F32',
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
      vector(`${l}.post_attention_layernorm.weight`, `blk.${i}.ffn_norm.weight`),
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

export function writeLlamaGguf(path: string, input: LlamaGgufInput, type: GgufType): void {
  const p = input.shape;
  const u32 = (value: number): MetaValue => ({ type: 'u32', value });
  const meta: [string, MetaValue][] = [
    ['general.architecture', { type: 'str', value: 'llama' }],
    ['general.name', { type: 'str', value: input.name }],
    ['general.file_type', u32(FILE_TYPE[type])],
    ['general.alignment', u32(ALIGNMENT)],
    ['llama.vocab_size', u32(p.vocabSize)],
    ['llama.context_length', u32(p.maxPositionEmbeddings)],
    ['llama.embedding_length', u32(p.hiddenSize)],
    ['llama.block_count', u32(p.numLayers)],
    ['llama.feed_forward_length', u32(p.intermediateSize)],
    ['llama.rope.dimension_count', u32(p.headDim)],
    ['llama.rope.freq_base', { type: 'f32', value: p.ropeTheta }],
    ['llama.attention.head_count', u32(p.numHeads)],
    ['llama.attention.head_count_kv', u32(p.numKvHeads)],
    ['llama.attention.key_length', u32(p.headDim)],
    ['llama.attention.value_length', u32(p.headDim)],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'f32', value: p.rmsNormEps }],
    ...tokenizerMeta(input.tokenizer, p.vocabSize),
  ];
  if (input.chatTemplate) meta.push(['tokenizer.chat_template', { type: 'str', value: input.chatTemplate }]);
  writeGguf(path, meta, llamaTensors(p, input.weights, type));
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

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      preset: { type: 'string' },
      type: { type: 'string', default: 'F32' },
      out: { type: 'string' },
      seed: { type: 'string', default: String(DEFAULT_SEED) },
    },
  });
  const { preset, type, out } = values;
  if (!preset || !isPresetName(preset) || !out || !(GGUF_TYPES as readonly string[]).includes(type!)) {
    console.error(`usage: gguf-writer --preset <name> --type ${GGUF_TYPES.join('|')} --out file.gguf [--seed N]`);
    process.exit(2);
  }
  writeLlamaGguf(out, presetGgufInput(preset, Number(values.seed)), type as GgufType);
  console.error(`wrote ${out}`);
}

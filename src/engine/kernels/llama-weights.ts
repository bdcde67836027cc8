import type { ModelConfig } from '../model/config.js';
/** Where weights go: linear memory, or (to measure a model before loading it) nowhere. */
export interface WeightSink {
  alloc(size: number): number;
  write(ptr: number, bytes: Uint8Array): void;
  /** A copy of bytes already placed (tensors streamed in before placement). */
  read(ptr: number, size: number): Uint8Array;
}
import { ONNX_FLOAT, ONNX_FLOAT16, ONNX_UINT8, type InitializerRef } from './onnx-initializers.js';

/**
 * A weight matrix as the kernels read it, in the format our ONNX exports store (scripts/model/weight-ops.ts),
 * at a byte offset in linear memory. K is the input width, N the output width.
 *   dense: float32 or float16, `kn` = MatMul's (K, N) or `nk` = the embedding's (N, K) used transposed;
 *   quant: MatMulNBits blocks (N, K/32, 32 * bits / 8) uint8, zero point 2^(bits-1), scales (N, K/32).
 */
export type Matrix =
  | { kind: 'dense'; dtype: 'f32' | 'f16'; layout: 'kn' | 'nk'; ptr: number; k: number; n: number }
  | { kind: 'quant'; bits: 4 | 8; ptr: number; scales: number; k: number; n: number; blocks: number };

/** The token embedding table, (vocab, hidden): float32, float16, or 8-bit blocks with scales. */
export type Embedding = { dtype: 'f32' | 'f16'; ptr: number } | { dtype: 'q8'; ptr: number; scales: number };

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
}

export interface LlamaWeights {
  embedding: Embedding;
  layers: LayerWeights[];
  norm: number; // (hidden) float32
  lmHead: Matrix; // hidden -> vocab
  /** RoPE inverse frequencies (head_dim / 2), exactly as the graph holds them (theta and any scaling). */
  invFreq: Float32Array;
  intermediateSize: number;
  /** Bytes of weights placed in linear memory. */
  bytes: number;
}

/** Bytes the weights of `file` take in linear memory; throws UnsupportedByKernels as placing them would. */
export function measureLlamaWeights(file: Uint8Array, index: Map<string, InitializerRef>, config: ModelConfig): number {
  let top = 0;
  placeLlamaWeights(file, index, config, {
    alloc: (size) => {
      top += Math.ceil(size / 64) * 64;
      return top;
    },
    write: () => {},
    read: () => new Uint8Array(0),
  });
  return top;
}

/** The graph is not one the kernels cover; the runner falls back to onnxruntime with this reason. */
export class UnsupportedByKernels extends Error {}

const EMBED = 'model.embed_tokens.weight';

/**
 * Copies the weights of one of our Llama exports from the ONNX file into linear memory, each tensor once
 * and in its stored format, and says where each one is; tensors already streamed into memory (`ptr` set,
 * `file` null) stay where they are. Refuses (UnsupportedByKernels) any graph whose initializers are not the
 * ones our exporter writes: names, element types and shapes are all checked.
 */
export function placeLlamaWeights(
  file: Uint8Array | null,
  index: Map<string, InitializerRef>,
  config: ModelConfig,
  memory: WeightSink,
): LlamaWeights {
  const refuse = (why: string): never => {
    throw new UnsupportedByKernels(why);
  };
  const { hiddenSize: H, numHeads, numKvHeads, headDim, vocabSize, numLayers } = config;
  const placed = new Map<string, number>();
  let bytes = 0;
  const place = (ref: InitializerRef): number => {
    const hit = placed.get(ref.name);
    if (hit !== undefined) return hit;
    const count = ref.dims.reduce((a, b) => a * b, 1);
    const size = count * (ref.dataType === ONNX_FLOAT ? 4 : ref.dataType === ONNX_FLOAT16 ? 2 : 1);
    if (ref.end - ref.start !== size) refuse(`initializer ${ref.name} does not keep its ${size} bytes in raw_data`);
    const ptr = ref.ptr ?? memory.alloc(size);
    if (ref.ptr === undefined) memory.write(ptr, file!.subarray(ref.start, ref.end));
    placed.set(ref.name, ptr);
    bytes += size;
    return ptr;
  };
  const find = (name: string): InitializerRef | undefined => index.get(name);
  const shapeIs = (ref: InitializerRef, dims: number[]): void => {
    if (ref.dims.join(',') !== dims.join(','))
      refuse(`initializer ${ref.name} has shape [${ref.dims}], expected [${dims}]`);
  };
  const vector = (name: string): number => {
    const ref = find(name) ?? refuse(`the graph has no initializer ${name}`);
    if (ref.dataType !== ONNX_FLOAT) refuse(`${name} is not float32`);
    shapeIs(ref, [H]);
    return place(ref);
  };
  /** A MatMul weight stored (K, N) dense, or as MatMulNBits blocks under `${name}_Q4|_Q8` + `_scales`. */
  const matrix = (name: string, k: number, n: number): Matrix => {
    const dense = find(name);
    if (dense) {
      if (dense.dataType !== ONNX_FLOAT && dense.dataType !== ONNX_FLOAT16)
        refuse(`${name} has element type ${dense.dataType}`);
      shapeIs(dense, [k, n]);
      return {
        kind: 'dense',
        dtype: dense.dataType === ONNX_FLOAT ? 'f32' : 'f16',
        layout: 'kn',
        ptr: place(dense),
        k,
        n,
      };
    }
    return quantMatrix(name, k, n);
  };
  const quantMatrix = (name: string, k: number, n: number): Matrix => {
    const bits = find(`${name}_Q4`)
      ? 4
      : find(`${name}_Q8`)
        ? 8
        : refuse(`the graph has no initializer ${name} (dense, _Q4 or _Q8): not an edge-infer Llama export`);
    const q = find(`${name}_Q${bits}`)!;
    const scales = find(`${name}_scales`) ?? refuse(`${name}_Q${bits} has no ${name}_scales`);
    const blocks = Math.ceil(k / 32);
    if (q.dataType !== ONNX_UINT8 || scales.dataType !== ONNX_FLOAT)
      refuse(`${name}'s blocks are not uint8 with float32 scales`);
    shapeIs(q, [n, blocks, bits * 4]);
    shapeIs(scales, [n, blocks]);
    return { kind: 'quant', bits: bits as 4 | 8, ptr: place(q), scales: place(scales), k, n, blocks };
  };

  if (H % 4 !== 0 || headDim % 8 !== 0) refuse(`hidden_size ${H} and head_dim ${headDim} must be multiples of 4 and 8`);
  if (numHeads % numKvHeads !== 0) refuse('num_attention_heads must be a multiple of num_key_value_heads');
  const invFreqRef = find('rope.inv_freq') ?? refuse('the graph has no rope.inv_freq initializer');
  if (invFreqRef.dataType !== ONNX_FLOAT || invFreqRef.end - invFreqRef.start !== 2 * headDim)
    refuse('rope.inv_freq is not head_dim / 2 float32 values');
  const invFreqBytes =
    invFreqRef.ptr === undefined
      ? file!.slice(invFreqRef.start, invFreqRef.end)
      : memory.read(invFreqRef.ptr, 2 * headDim);
  const invFreq = new Float32Array(invFreqBytes.buffer, invFreqBytes.byteOffset, headDim / 2);

  const gate0 = find('model.layers.0.mlp.gate_proj.weight') ?? find('model.layers.0.mlp.gate_proj.weight_scales');
  if (!gate0) refuse('the graph has no model.layers.0.mlp.gate_proj weight');
  // Dense (hidden, intermediate), or quantised scales (intermediate, blocks).
  const intermediateSize = gate0!.name.endsWith('_scales') ? gate0!.dims[0] : gate0!.dims[1];

  let embedding: Embedding;
  const embed = find(EMBED);
  if (embed) {
    if (embed.dataType !== ONNX_FLOAT && embed.dataType !== ONNX_FLOAT16)
      refuse(`${EMBED} has element type ${embed.dataType}`);
    shapeIs(embed, [vocabSize, H]);
    embedding = { dtype: embed.dataType === ONNX_FLOAT ? 'f32' : 'f16', ptr: place(embed) };
  } else {
    const m = quantMatrix(EMBED, H, vocabSize);
    if (m.kind !== 'quant' || m.bits !== 8 || H % 32 !== 0)
      refuse('a quantised embedding must be 8-bit blocks over a hidden size that is a multiple of 32');
    embedding = { dtype: 'q8', ptr: m.ptr, scales: (m as { scales: number }).scales };
  }

  const layers: LayerWeights[] = [];
  for (let i = 0; i < numLayers; i++) {
    const l = `model.layers.${i}`;
    const qOut = numHeads * headDim;
    const kvOut = numKvHeads * headDim;
    layers.push({
      attnNorm: vector(`${l}.input_layernorm.weight`),
      q: matrix(`${l}.self_attn.q_proj.weight`, H, qOut),
      k: matrix(`${l}.self_attn.k_proj.weight`, H, kvOut),
      v: matrix(`${l}.self_attn.v_proj.weight`, H, kvOut),
      o: matrix(`${l}.self_attn.o_proj.weight`, qOut, H),
      mlpNorm: vector(`${l}.post_attention_layernorm.weight`),
      gate: matrix(`${l}.mlp.gate_proj.weight`, H, intermediateSize),
      up: matrix(`${l}.mlp.up_proj.weight`, H, intermediateSize),
      down: matrix(`${l}.mlp.down_proj.weight`, intermediateSize, H),
    });
  }
  const norm = vector('model.norm.weight');

  let lmHead: Matrix;
  if (!config.tieWordEmbeddings) lmHead = matrix('lm_head.weight', H, vocabSize);
  else if (embedding.dtype === 'q8')
    lmHead = {
      kind: 'quant',
      bits: 8,
      ptr: embedding.ptr,
      scales: embedding.scales,
      k: H,
      n: vocabSize,
      blocks: H / 32,
    };
  else lmHead = { kind: 'dense', dtype: embedding.dtype, layout: 'nk', ptr: embedding.ptr, k: H, n: vocabSize };

  return { embedding, layers, norm, lmHead, invFreq, intermediateSize, bytes };
}

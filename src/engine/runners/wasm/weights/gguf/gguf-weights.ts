import { GGML_TYPE, ggmlRowBytes, ggmlTypeName } from '../../../../formats/gguf/ggml-types.js';
import { readGgufHeader, tensorsByOffset, type GgufTensorInfo } from '../../../../formats/gguf/gguf-header.js';
import type { ModelConfig } from '../../../../model/config.js';
import type { BuildContext } from '../matrix-builders.js';
import {
  checkShapes,
  inSpan,
  layerExtras,
  ropeInvFreq,
  type LayerSpan,
  type LayerWeights,
  type LlamaWeights,
} from '../llama-weights.js';
import { allocQuant, groupedV4, interleaveV4, matrixBytes, type Matrix, type QuantFormat } from '../matrix.js';
import { UnsupportedByKernels } from '../../../../formats/unsupported.js';

/** How each ggml block type lands in the kernels' forms (kernels/quant.h), and its zero point. */
const FORMAT: Partial<Record<number, { format: QuantFormat; zp: number }>> = {
  [GGML_TYPE.Q8_0]: { format: 'v8-zp', zp: 0 },
  [GGML_TYPE.Q4_0]: { format: 'v4-zp', zp: 8 },
  [GGML_TYPE.Q4_1]: { format: 'v4-min', zp: 0 },
  [GGML_TYPE.Q5_0]: { format: 'v5-zp', zp: 16 },
  [GGML_TYPE.Q5_1]: { format: 'v5-min', zp: 0 },
  [GGML_TYPE.Q4_K]: { format: 'v4-kmin', zp: 0 },
  [GGML_TYPE.Q5_K]: { format: 'v5-kmin', zp: 0 },
  [GGML_TYPE.Q6_K]: { format: 'v6-k16', zp: 0 },
};

/** Bytes of tensor data staged at once while repacking (whole rows). */
const STAGING = 1 << 20;

/** The architectures the loader reads, by general.architecture, and the config.json model_type of each. */
const MODEL_TYPES: Record<string, string> = { llama: 'llama', qwen2: 'qwen2', qwen3: 'qwen3', gemma3: 'gemma3_text' };

/** A layer's float32 vectors besides its two norms, by GGUF name (after blk.N.). */
const LAYER_VECTORS = new Set([
  'attn_q.bias',
  'attn_k.bias',
  'attn_v.bias',
  'attn_q_norm.weight',
  'attn_k_norm.weight',
  'post_attention_norm.weight',
  'post_ffw_norm.weight',
]);

/**
 * A GGUF file's role for each tensor name: GGUF names its tensors by the format's own scheme (llama.cpp's
 * gguf-py constants), so the name is the role. In a `llama` file Q and K rows come permuted for llama.cpp's
 * interleaved RoPE (its converter's `permute`); they are put back in Hugging Face's order, which the kernels'
 * RoPE computes. Qwen's files are written in that order already (llama.cpp runs NEOX RoPE for them).
 */
function role(
  name: string,
):
  | { layer: number; part: keyof LayerWeights }
  | { layer: number; vector: string }
  | 'embedding'
  | 'norm'
  | 'lmHead'
  | undefined {
  if (name === 'token_embd.weight') return 'embedding';
  if (name === 'output_norm.weight') return 'norm';
  if (name === 'output.weight') return 'lmHead';
  const extra = /^blk\.(\d+)\.(\w+\.(?:weight|bias))$/.exec(name);
  if (extra && LAYER_VECTORS.has(extra[2])) return { layer: Number(extra[1]), vector: extra[2] };
  const m = /^blk\.(\d+)\.(\w+)\.weight$/.exec(name);
  if (!m) return undefined;
  const part = (
    {
      attn_norm: 'attnNorm',
      attn_q: 'q',
      attn_k: 'k',
      attn_v: 'v',
      attn_output: 'o',
      ffn_norm: 'mlpNorm',
      ffn_gate: 'gate',
      ffn_up: 'up',
      ffn_down: 'down',
    } as const
  )[m[2] as 'attn_q'];
  return part && { layer: Number(m[1]), part };
}

/**
 * Streams a GGUF file into linear memory: the header, then each tensor in file order, placed in the form the
 * kernels read: F32 / F16 / BF16 as they are ((N, K), Hugging Face's layout), ggml's blocks repacked by
 * repack_ggml into quant.h's planes as whole rows arrive (lossless: the same values, scales and mins).
 */
export async function loadGgufWeights(
  chunks: AsyncIterable<Uint8Array>,
  config: ModelConfig,
  ctx: BuildContext,
  budget: (placedBytes: number) => void,
  span: LayerSpan,
): Promise<LlamaWeights> {
  const { header, reader } = await readGgufHeader(chunks);
  const arch = header.metadata.get('general.architecture');
  const archName = arch?.type === 'string' ? arch.value : '?';
  if (MODEL_TYPES[archName] === undefined)
    throw new UnsupportedByKernels(
      `GGUF architecture ${archName} (the kernels run ${Object.keys(MODEL_TYPES).join(', ')})`,
    );
  if (MODEL_TYPES[archName] !== config.modelType)
    throw new UnsupportedByKernels(`GGUF architecture ${archName}, where config.json says ${config.modelType}`);
  const permuted = archName === 'llama';
  const mem = ctx.memory;
  const start = mem.used;
  const vectors = new Map<string, number>();
  const matrices = new Map<string, Matrix>();
  let vectorBytes = 0;
  /** A vector's length from config.json: a norm's is hidden; a bias's its product's width; a q/k norm's head_dim. */
  const vectorLength = (name: string | undefined): number =>
    name === 'attn_q.bias'
      ? config.numHeads * config.headDim
      : name === 'attn_k.bias' || name === 'attn_v.bias'
        ? config.numKvHeads * config.headDim
        : name === 'attn_q_norm.weight' || name === 'attn_k_norm.weight'
          ? config.headDim
          : config.hiddenSize;
  await reader.skip(header.dataStart - reader.position);
  for (const t of tensorsByOffset(header.tensors)) {
    const r = role(t.name);
    const at = header.dataStart + t.offset;
    if (reader.position > at) throw new UnsupportedByKernels(`GGUF tensor ${t.name} overlaps the one before it`);
    // Not a weight the kernels use (e.g. rope_freqs), or another stage's: skipped with the run it is in, in one
    // skip at the next tensor placed (a ranged read past another stage's layers where the source can).
    if (r === undefined || !inSpan(span, typeof r === 'object' ? r.layer : undefined)) continue;
    await reader.skip(at - reader.position);
    if (r === 'norm' || (typeof r === 'object' && ('vector' in r || r.part === 'attnNorm' || r.part === 'mlpNorm'))) {
      const length = vectorLength(typeof r === 'object' && 'vector' in r ? r.vector : undefined);
      if (t.type !== GGML_TYPE.F32 || t.ne.length !== 1 || t.ne[0] !== length)
        throw new UnsupportedByKernels(`${t.name} is not a float32 vector of ${length}`);
      const ptr = mem.alloc(length * 4);
      await reader.readInto(mem.u8(ptr, length * 4));
      vectors.set(t.name, ptr);
      vectorBytes += length * 4;
    } else {
      const part = typeof r === 'object' && 'part' in r ? r.part : undefined;
      const heads = !permuted ? 0 : part === 'q' ? config.numHeads : part === 'k' ? config.numKvHeads : 0;
      // A table's rows are token ids: a stage holding part of the vocabulary places only its rows.
      const rows = r === 'embedding' || r === 'lmHead' ? span.vocab : undefined;
      matrices.set(t.name, await placeMatrix(t, heads, config.headDim, rows));
    }
    budget(mem.used - start);
  }
  // Past the last tensor: read to the end, so whatever watches the stream (the weights' digest) sees it end.
  await reader.toEnd();

  async function placeMatrix(
    t: GgufTensorInfo,
    heads: number,
    headDim: number,
    window?: { from: number; to: number },
  ): Promise<Matrix> {
    if (t.ne.length !== 2) throw new UnsupportedByKernels(`${t.name} has ${t.ne.length} dimensions, expected 2`);
    const k = t.ne[0];
    const rowBytes = ggmlRowBytes(t.type, k);
    // The rows before the window are skipped here, those after it with the run to the next tensor placed.
    if (window) await reader.skip(window.from * rowBytes);
    const n = window ? window.to - window.from : t.ne[1];
    /** Where file row `row` goes: Q and K rows back in Hugging Face's order (per head, 2i + j from j * half + i). */
    const dest = (row: number): number => {
      if (!heads) return row;
      const half = headDim / 2;
      const h = Math.floor(row / headDim);
      const within = row % headDim;
      return h * headDim + (within % 2) * half + Math.floor(within / 2);
    };
    if (t.type === GGML_TYPE.F32 || t.type === GGML_TYPE.F16 || t.type === GGML_TYPE.BF16) {
      const ptr = mem.alloc(n * rowBytes);
      for (let row = 0; row < n; row++) await reader.readInto(mem.u8(ptr + dest(row) * rowBytes, rowBytes));
      const dtype = t.type === GGML_TYPE.F32 ? 'f32' : t.type === GGML_TYPE.F16 ? 'f16' : 'bf16';
      return { kind: 'dense', dtype, layout: 'nk', ptr, k, n };
    }
    const form = FORMAT[t.type];
    if (!form)
      throw new UnsupportedByKernels(
        `${t.name} is ${ggmlTypeName(t.type)} (the kernels read F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)`,
      );
    const blocks = k / 32;
    const matrix = allocQuant(mem, form.format, k, n, { zpConst: form.zp });
    // Rows arrive through a staging area past the planes, then move into them: the area is free again after.
    const rowsPerStage = heads ? 1 : Math.max(1, Math.floor(STAGING / rowBytes));
    const staging = mem.alloc(rowsPerStage * rowBytes);
    for (let row = 0; row < n; row += rowsPerStage) {
      const rows = Math.min(rowsPerStage, n - row);
      await reader.readInto(mem.u8(staging, rows * rowBytes));
      ctx.kernels.repack_ggml(t.type, staging, dest(row), rows, blocks, matrix.header);
    }
    mem.free(staging);
    if (groupedV4(form.format)) interleaveV4(mem, ctx.kernels, matrix.planes.q, n, blocks);
    return matrix;
  }

  const vector = (name: string): number => {
    const ptr = vectors.get(name);
    if (ptr === undefined) throw new UnsupportedByKernels(`the GGUF file has no ${name}`);
    return ptr;
  };
  const matrix = (name: string): Matrix => {
    const m = matrices.get(name);
    if (!m) throw new UnsupportedByKernels(`the GGUF file has no ${name}`);
    return m;
  };
  const extras = layerExtras(config);
  const layers: LayerWeights[] = [];
  for (let i = span.from; i < span.to; i++)
    layers[i] = {
      ...(extras.bias && {
        bias: {
          q: vector(`blk.${i}.attn_q.bias`),
          k: vector(`blk.${i}.attn_k.bias`),
          v: vector(`blk.${i}.attn_v.bias`),
        },
      }),
      ...(extras.qkNorm && {
        qkNorm: { q: vector(`blk.${i}.attn_q_norm.weight`), k: vector(`blk.${i}.attn_k_norm.weight`) },
      }),
      ...(extras.postNorm && {
        postNorm: { attn: vector(`blk.${i}.post_attention_norm.weight`), mlp: vector(`blk.${i}.post_ffw_norm.weight`) },
      }),
      attnNorm: vector(`blk.${i}.attn_norm.weight`),
      q: matrix(`blk.${i}.attn_q.weight`),
      k: matrix(`blk.${i}.attn_k.weight`),
      v: matrix(`blk.${i}.attn_v.weight`),
      o: matrix(`blk.${i}.attn_output.weight`),
      mlpNorm: vector(`blk.${i}.ffn_norm.weight`),
      gate: matrix(`blk.${i}.ffn_gate.weight`),
      up: matrix(`blk.${i}.ffn_up.weight`),
      down: matrix(`blk.${i}.ffn_down.weight`),
    };
  const ends = (): LlamaWeights['ends'] => {
    const embedding = matrix('token_embd.weight');
    // Tied embeddings: llama.cpp's files leave output.weight out and use the table.
    return { embedding, norm: vector('output_norm.weight'), lmHead: matrices.get('output.weight') ?? embedding };
  };
  const weights: LlamaWeights = {
    span,
    ends: span.ends ? ends() : undefined,
    layers,
    invFreq: ropeInvFreq(config),
    ...(config.slidingWindow && {
      // HF's Gemma 3 scales only its global layers' RoPE; the local ones run the default at their own base.
      localInvFreq: ropeInvFreq({ ...config, ropeTheta: config.slidingWindow.ropeTheta, ropeScaling: undefined }),
    }),
    intermediateSize: layers[span.from]?.gate.n ?? 0,
    bytes: [...matrices.values()].reduce((n, m) => n + matrixBytes(m), 0) + vectorBytes,
  };
  checkShapes(weights, config);
  return weights;
}

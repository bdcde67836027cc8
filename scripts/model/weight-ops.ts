// How each dtype stores weights and emits the ops that use them.
//   fp32: SPEC names and layouts, MatMul / Gather; tied logits via Gemm(transB=1) on the embedding
//         (one copy of the embedding).
//   fp16: matrices and embedding stored float16 under the same names, each followed by one Cast to
//         float (activations stay fp32). Norm weights stay fp32 (tiny; avoids needless rounding).
//   int8: every projection is com.microsoft MatMulNBits bits=8 (block 32, symmetric). The embedding
//         is stored once as 8-bit blocks: Gather reads rows of it and dequantises them in-graph, and
//         the tied output projection is a MatMulNBits on the same initializers (the (vocab, hidden)
//         embedding already is MatMulNBits' (N, K) layout).
//   q4:   projections MatMulNBits bits=4 (block 32, symmetric); embedding and output projection
//         8-bit as in int8 (the usual choice for 4-bit exports: the output projection is the most
//         error-sensitive matrix, and sharing it with the Gather keeps one copy).
import { int, type GraphBuilder } from './graph-builder.js';
import { toHalf } from '../../src/engine/model/half.js';
import { DataType } from './onnx-proto-writer.js';
import type { LlamaShape } from './presets.js';
import {
  quantizeMatMulWeight,
  quantizeRowMajor,
  roundTripMatMulWeight,
  roundTripRowMajor,
  type NBitsWeight,
} from './quantize.js';
import type { WeightMap } from './weights.js';

export type Dtype = 'fp32' | 'fp16' | 'int8' | 'q4';
export const DTYPES: readonly Dtype[] = ['fp32', 'fp16', 'int8', 'q4'];

export const ONNX_FILE: Record<Dtype, string> = {
  fp32: 'model.onnx',
  fp16: 'model_fp16.onnx',
  int8: 'model_int8.onnx',
  q4: 'model_q4.onnx',
};

export interface WeightOps {
  /** x (..., in) @ W (in, out) -> (..., out) */
  linear(x: string, name: string): string;
  /** ids (b, s) -> (b, s, hidden) */
  embed(ids: string): string;
  /** x (b, s, hidden) -> logits (b, s, vocab) named `out`; `ids` (b, s) gives the output shape. */
  lmHead(x: string, ids: string, out: string): string;
  /** A norm weight (hidden), always fp32. */
  vector(name: string): string;
}

const EMBED = 'model.embed_tokens.weight';

/**
 * MatMulNBits accuracy_level 4 = int8 activations. Measured on bench-135m, onnxruntime-node 1.30 CPU,
 * one thread: level 0 has no packed kernel for these shapes and dequantises B on every call
 * (int8 1.1 tok/s, q4 1.9 tok/s); level 4 runs 59 / 71 tok/s. The price is ~3% relative logit
 * error from quantising activations. onnxruntime-web's WASM build ignores it (always exact fp32,
 * and always the slow unpacked path).
 */
const ACCURACY_LEVEL = 4;

export function weightOps(g: GraphBuilder, p: LlamaShape, w: WeightMap, dtype: Dtype): WeightOps {
  const get = (name: string) => {
    const t = w.get(name);
    if (!t) throw new Error(`missing weight ${name}`);
    return t;
  };
  const vector = (name: string) =>
    g.initializer({ name, dataType: DataType.FLOAT, dims: get(name).dims, data: get(name).data });
  if (dtype === 'fp32' || dtype === 'fp16') return denseOps(g, p, get, dtype, vector);
  return quantOps(g, p, get, dtype === 'q4' ? 4 : 8, vector);
}

type Getter = (name: string) => { dims: number[]; data: Float32Array };

function denseOps(
  g: GraphBuilder,
  p: LlamaShape,
  get: Getter,
  dtype: 'fp32' | 'fp16',
  vector: (n: string) => string,
): WeightOps {
  const refs = new Map<string, string>();
  // The float32 value of a weight: the initializer itself, or one Cast shared by all its users.
  const ref = (name: string): string => {
    const hit = refs.get(name);
    if (hit) return hit;
    const t = get(name);
    let out: string;
    if (dtype === 'fp32') out = g.initializer({ name, dataType: DataType.FLOAT, dims: t.dims, data: t.data });
    else {
      g.initializer({ name, dataType: DataType.FLOAT16, dims: t.dims, data: toHalf(t.data) });
      out = g.op('Cast', [name], { name: `${name}_f32`, attrs: { to: int(DataType.FLOAT) } });
    }
    refs.set(name, out);
    return out;
  };
  return {
    vector,
    linear: (x, name) => g.op('MatMul', [x, ref(name)], { name: name.replace(/\.weight$/, '') }),
    embed: (ids) => g.op('Gather', [ref(EMBED), ids], { name: 'model.embed_tokens', attrs: { axis: int(0) } }),
    lmHead: (x, ids, out) => {
      if (!p.tieWordEmbeddings) return g.op('MatMul', [x, ref('lm_head.weight')], { name: 'lm_head', out });
      // Gemm wants 2-D input: (b*s, hidden) @ embed^T -> (b*s, vocab) -> (b, s, vocab)
      const x2 = g.op('Reshape', [x, g.i64([-1, p.hiddenSize])], { name: 'lm_head/flatten' });
      const y2 = g.op('Gemm', [x2, ref(EMBED)], { name: 'lm_head', attrs: { transB: int(1) } });
      const bs = g.op('Shape', [ids], { name: 'lm_head/bs' }); // (2) [b, s]
      const shape = g.op('Concat', [bs, g.i64([p.vocabSize])], { name: 'lm_head/shape', attrs: { axis: int(0) } });
      return g.op('Reshape', [y2, shape], { name: 'lm_head/unflatten', out });
    },
  };
}

function quantOps(
  g: GraphBuilder,
  p: LlamaShape,
  get: Getter,
  projBits: 4 | 8,
  vector: (n: string) => string,
): WeightOps {
  const registered = new Set<string>();
  // (n, kBlocks, blob) packed weights + (n, kBlocks) scales, stored once per weight.
  const register = (q: NBitsWeight, name: string): { b: string; s: string } => {
    const b = `${name}_Q${q.bits}`;
    const s = `${name}_scales`;
    if (!registered.has(b)) {
      g.initializer({
        name: b,
        dataType: DataType.UINT8,
        dims: [q.n, q.kBlocks, (q.blockSize * q.bits) / 8],
        data: q.packed,
      });
      g.initializer({ name: s, dataType: DataType.FLOAT, dims: [q.n, q.kBlocks], data: q.scales });
      registered.add(b);
    }
    return { b, s };
  };
  const nbits = (x: string, q: NBitsWeight, name: string, label: string, out?: string): string => {
    const { b, s } = register(q, name);
    return g.op('MatMulNBits', [x, b, s], {
      name: label,
      domain: 'com.microsoft',
      out,
      attrs: {
        K: int(q.k),
        N: int(q.n),
        bits: int(q.bits),
        block_size: int(q.blockSize),
        accuracy_level: int(ACCURACY_LEVEL),
      },
    });
  };
  const matmulQ = (name: string, bits: 4 | 8) => {
    const t = get(name);
    return quantizeMatMulWeight(t.data, t.dims[0], t.dims[1], bits);
  };
  let embedQ: NBitsWeight | undefined;
  const embedQuant = (): NBitsWeight => {
    if (!embedQ) {
      const t = get(EMBED);
      embedQ = quantizeRowMajor(t.data, p.vocabSize, p.hiddenSize, 8);
      if (embedQ.kBlocks * embedQ.blockSize !== p.hiddenSize)
        throw new Error('hidden_size must be a multiple of the block size');
    }
    return embedQ;
  };
  return {
    vector,
    linear: (x, name) => nbits(x, matmulQ(name, projBits), name, name.replace(/\.weight$/, '')),
    embed: (ids) => {
      const q = embedQuant();
      const { b: bName, s: sName } = register(q, EMBED);
      const rows = g.op('Gather', [bName, ids], { name: 'model.embed_tokens', attrs: { axis: int(0) } }); // (b, s, kb, 32) u8
      const rowsF = g.op('Cast', [rows], { name: 'model.embed_tokens/cast', attrs: { to: int(DataType.FLOAT) } });
      const centred = g.op('Sub', [rowsF, g.f32(128, 'zp128')], { name: 'model.embed_tokens/zp' });
      const sc = g.op('Gather', [sName, ids], { name: 'model.embed_tokens/scales', attrs: { axis: int(0) } }); // (b, s, kb)
      const sc4 = g.op('Unsqueeze', [sc, g.i64([-1])], { name: 'model.embed_tokens/scales4' }); // (b, s, kb, 1)
      const deq = g.op('Mul', [centred, sc4], { name: 'model.embed_tokens/dequant' });
      return g.op('Reshape', [deq, g.i64([0, 0, p.hiddenSize])], { name: 'model.embed_tokens/rows' });
    },
    lmHead: (x, _ids, out) => {
      if (p.tieWordEmbeddings) return nbits(x, embedQuant(), EMBED, 'lm_head', out);
      return nbits(x, matmulQ('lm_head.weight', 8), 'lm_head.weight', 'lm_head', out);
    },
  };
}

/**
 * The fp32 weights a quantised variant effectively uses (each matrix after a quantise/dequantise
 * round trip). An fp32 model built from them must match the quantised model up to float rounding,
 * which checks the packing independently of quantisation error.
 */
export function effectiveWeights(p: LlamaShape, w: WeightMap, dtype: 'int8' | 'q4'): WeightMap {
  const projBits = dtype === 'q4' ? 4 : 8;
  const out: WeightMap = new Map();
  for (const [name, t] of w) {
    let data = t.data;
    if (name === EMBED) data = roundTripRowMajor(t.data, p.vocabSize, p.hiddenSize, 8);
    else if (name === 'lm_head.weight') data = roundTripMatMulWeight(t.data, t.dims[0], t.dims[1], 8);
    else if (t.dims.length === 2) data = roundTripMatMulWeight(t.data, t.dims[0], t.dims[1], projBits);
    out.set(name, { dims: t.dims, data });
  }
  return out;
}

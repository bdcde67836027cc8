// How each hub dtype stores a weight and the nodes that use it, named as the exporter and onnxruntime's
// quantisers name them (see hub-flavour.ts and docs/models.md, "The hub's ONNX exports"):
//   fp32 / fp16   MatMul(x, onnx::MatMul_<n>) with the weight transposed to (K, N); fp16 stores it half
//   q4 / q4f16    MatMulNBits(x, onnx::MatMul_<n>_Q4, _scales[, _zero_points]) named …/MatMul_Q4
//   int8 / uint8 / quantized
//                 DynamicQuantizeLinear(x) -> MatMulInteger(x_q, onnx::MatMul_<n>_quantized, x_zp, _zero_point)
//                 -> Cast(float) -> Mul(·, Mul(x_scale, onnx::MatMul_<n>_scale)), named …/MatMul_quant*
// Every weight a graph stores is also recorded, dequantised, in `effective` (reference names and layouts)
// when given: a float64 reference on those weights computes what the graph's weights hold.
import { fromHalf, toHalf } from '../../../src/engine/model/half.js';
import { int } from '../graph-builder.js';
import { DataType } from '../onnx-proto-writer.js';
import type { LlamaShape } from '../presets.js';
import type { WeightMap } from '../weights.js';
import type { ExportGraph } from './export-graph.js';
import { isDynamic, isHalf, isNBits, weightType, type HubFlavour } from './hub-flavour.js';
import { dequantizeLinear8, dequantizeNBits, quantizeLinear8, quantizeNBits } from './ort-quantize.js';

export interface HubWeightOps {
  /** ids (b, s) -> (b, s, hidden) in the activation type */
  embed(ids: string): string;
  /** x (..., K) @ W (K, N) for the weight `name` (reference name; lm_head.weight for the output projection) */
  linear(x: string, name: string, scope: string, out?: string): string;
  /** A norm weight (hidden) in the activation type. */
  norm(name: string): string;
}

const EMBED = 'model.embed_tokens.weight';
const roundHalf = (d: Float32Array) => fromHalf(toHalf(d));

export function hubWeightOps(g: ExportGraph, p: LlamaShape, w: WeightMap, f: HubFlavour, effective?: WeightMap) {
  const half = isHalf(f.dtype);
  const act = half ? DataType.FLOAT16 : DataType.FLOAT;
  const keep = (name: string, dims: number[], data: Float32Array) => effective?.set(name, { dims, data });
  const stored = (d: Float32Array) =>
    half ? { dataType: DataType.FLOAT16, data: toHalf(d) } : { dataType: act, data: d };

  /** (K, N) of a projection; the output projection is the embedding transposed when tied (the exporter
   * folds a copy). */
  const matrix = (name: string): { k: number; n: number; data: Float32Array } => {
    if (name === 'lm_head.weight' && p.tieWordEmbeddings) {
      const e = w.get(EMBED)!.data;
      const t = new Float32Array(e.length);
      for (let v = 0; v < p.vocabSize; v++)
        for (let h = 0; h < p.hiddenSize; h++) t[h * p.vocabSize + v] = e[v * p.hiddenSize + h];
      return { k: p.hiddenSize, n: p.vocabSize, data: t };
    }
    const t = w.get(name);
    if (!t) throw new Error(`missing weight ${name}`);
    return { k: t.dims[0], n: t.dims[1], data: t.data };
  };

  const dense = (x: string, name: string, scope: string, out?: string): string => {
    const { k, n, data } = matrix(name);
    const b = g.fold('MatMul', { dims: [k, n], ...stored(data) });
    keep(name, [k, n], half ? roundHalf(data) : data);
    return g.op('MatMul', [x, b], scope, { out });
  };

  const nbits = (x: string, name: string, scope: string, out?: string): string => {
    const { k, n, data } = matrix(name);
    const o = { bits: f.bits, blockSize: f.blockSize, symmetric: f.symmetric, halfScales: half };
    const q = quantizeNBits(data, k, n, o);
    const base = g.foldedName('MatMul');
    const inputs = [
      x,
      g.derived({
        name: `${base}_Q${f.bits}`,
        dataType: DataType.UINT8,
        dims: [n, q.kBlocks, (f.blockSize * f.bits) / 8],
        data: q.packed,
      }),
      g.derived({ name: `${base}_scales`, dims: [n * q.kBlocks], ...stored(q.scales) }),
    ];
    if (q.zeroPoints)
      inputs.push(
        g.derived({
          name: `${base}_zero_points`,
          dataType: DataType.UINT8,
          dims: [q.zeroPoints.length],
          data: q.zeroPoints,
        }),
      );
    keep(name, [k, n], dequantizeNBits(q, f.bits, f.blockSize));
    const attrs = { K: int(k), N: int(n), bits: int(f.bits), block_size: int(f.blockSize) };
    return g.op('MatMulNBits', inputs, scope, {
      name: `${scope}/MatMul_Q${f.bits}`,
      domain: 'com.microsoft',
      out: out ?? `${scope}/MatMul_output_0`,
      attrs: f.accuracyLevel === undefined ? attrs : { ...attrs, accuracy_level: int(f.accuracyLevel) },
    });
  };

  // quantize_dynamic quantises each activation once, however many MatMuls read it (q/k/v share one).
  const quantizedInputs = new Map<string, string[]>();
  const dynamicInput = (x: string): string[] => {
    let hit = quantizedInputs.get(x);
    if (!hit) {
      const outputs = [`${x}_quantized`, `${x}_scale`, `${x}_zero_point`];
      hit = g.node('DynamicQuantizeLinear', [x], '', { name: `${x}_QuantizeLinear`, outputs });
      quantizedInputs.set(x, hit);
    }
    return hit;
  };
  const qType = weightType(f.dtype) === 'int8' ? DataType.INT8 : DataType.UINT8;

  const dynamic = (x: string, name: string, scope: string, out?: string): string => {
    const { k, n, data } = matrix(name);
    const q = quantizeLinear8(data, k, n, weightType(f.dtype), f.perChannel);
    const base = g.foldedName('MatMul');
    const perDims = f.perChannel ? [n] : [];
    const wq = g.derived({ name: `${base}_quantized`, dataType: qType, dims: [k, n], data: q.data });
    const ws = g.derived({ name: `${base}_scale`, dataType: DataType.FLOAT, dims: perDims, data: q.scale });
    const wz = g.derived({ name: `${base}_zero_point`, dataType: qType, dims: perDims, data: q.zeroPoint });
    keep(name, [k, n], dequantizeLinear8(q, k, n));
    const [xq, xs, xz] = dynamicInput(x);
    const node = `${scope}/MatMul_quant`;
    const result = out ?? `${scope}/MatMul_output_0`;
    const mm = g.op('MatMulInteger', [xq, wq, xz, wz], scope, { name: node, out: `${result}_output_quantized` });
    const cast = g.op('Cast', [mm], scope, {
      name: `${mm}_cast`,
      out: `${mm}_cast_output`,
      attrs: { to: int(DataType.FLOAT) },
    });
    const scale = g.op('Mul', [xs, ws], scope, { name: `${node}_scales_mul`, out: `${node}_scales_mul:0` });
    return g.op('Mul', [cast, scale], scope, { name: `${node}_output_scale_mul`, out: result });
  };

  const embed = (ids: string): string => {
    const e = w.get(EMBED)!;
    const scope = '/model/embed_tokens';
    if (!isDynamic(f.dtype)) {
      const table = g.param({ name: EMBED, dims: e.dims, ...stored(e.data) });
      keep(EMBED, e.dims, half ? roundHalf(e.data) : e.data);
      return g.op('Gather', [table, ids], scope, { attrs: { axis: int(0) } });
    }
    // quantize_dynamic quantises the table as an activation: uint8 per tensor, symmetric when the weights are (int8).
    const [rows, cols] = e.dims;
    const q = quantizeLinear8(e.data, rows, cols, 'uint8', false, weightType(f.dtype) === 'int8');
    const t = g.derived({ name: `${EMBED}_quantized`, dataType: DataType.UINT8, dims: e.dims, data: q.data });
    const s = g.derived({ name: `${EMBED}_scale`, dataType: DataType.FLOAT, dims: [], data: q.scale });
    const z = g.derived({ name: `${EMBED}_zero_point`, dataType: DataType.UINT8, dims: [], data: q.zeroPoint });
    keep(EMBED, e.dims, dequantizeLinear8(q, rows, cols));
    const out = `${scope}/Gather_output_0`;
    const rowsQ = g.op('Gather', [t, ids], scope, {
      name: `${scope}/Gather`,
      out: `${out}_quantized`,
      attrs: { axis: int(0) },
    });
    return g.op('DequantizeLinear', [rowsQ, s, z], '', { name: `${out}_DequantizeLinear`, out });
  };

  const norm = (name: string): string => {
    const t = w.get(name);
    if (!t) throw new Error(`missing weight ${name}`);
    keep(name, t.dims, half ? roundHalf(t.data) : t.data);
    const data = { dims: t.dims, ...stored(t.data) };
    return f.normNames === 'param' ? g.param({ name, ...data }) : g.fold('Mul', data);
  };

  const linear = isNBits(f.dtype) ? nbits : isDynamic(f.dtype) ? dynamic : dense;
  return { embed, linear, norm } satisfies HubWeightOps;
}

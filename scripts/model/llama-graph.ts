// Llama decoder graph (HF Optimum I/O, docs/models.md "Model folder layout") from standard opset-17 ops,
// plus com.microsoft MatMulNBits in the quantised variants.
//
// Op list (per model): Shape, Sub, Squeeze, Range, Unsqueeze, Less, Not, Cast, And, Where (mask);
// Cast, Unsqueeze, Mul, Concat, Cos, Sin (RoPE tables); Gather (embedding).
// Per layer: RMSNorm = Mul, ReduceMean, Add, Sqrt, Div, Mul; q/k/v = MatMul | MatMulNBits; Reshape,
// Transpose; RoPE = Mul, Slice, Neg, Concat, Add; present = Concat(past, new, axis 2); GQA scores =
// MatMul of q (b, kv, group, s, hd) with k^T (b, kv, 1, hd, T) (broadcast); Mul (1/sqrt(hd)), Add
// (mask bias), Softmax, MatMul with v (b, kv, 1, T, hd), Reshape/Transpose back, o_proj, Add;
// MLP = gate, up, Sigmoid, Mul, Mul, down, Add. Then final RMSNorm and lm_head (MatMul, Gemm or
// MatMulNBits).
import { GraphBuilder, int, ints } from './graph-builder.js';
import { DataType, type Dim, type ModelDef } from './onnx-proto-writer.js';
import type { LlamaShape } from './presets.js';
import { weightOps, type Dtype, type WeightOps } from './weight-ops.js';
import { layerPrefix, ropeInvFreq, type WeightMap } from './weights.js';

/** Additive bias for hidden keys: large and finite so fully masked rows give no NaN. */
const MASK_NEG = -1e9;
const TOTAL: Dim = 'past_sequence_length + sequence_length';

/** I/O element types. `float16` for kv and logits is what optimum's fp16 exports (onnx-community's model_fp16.onnx) take and return. */
export interface GraphIoTypes {
  kv?: 'float32' | 'float16';
  logits?: 'float32' | 'float16';
  /** false: no position_ids input; positions are counted from attention_mask, as some exports do. */
  positionIds?: boolean;
}

export function buildLlamaModel(p: LlamaShape, w: WeightMap, dtype: Dtype, io: GraphIoTypes = {}): ModelDef {
  if (p.numHeads % p.numKvHeads !== 0) throw new Error('num_attention_heads must be a multiple of num_key_value_heads');
  const g = new GraphBuilder();
  const ids = g.input({ name: 'input_ids', elemType: DataType.INT64, shape: ['batch_size', 'sequence_length'] });
  const mask = g.input({ name: 'attention_mask', elemType: DataType.INT64, shape: ['batch_size', TOTAL] });
  const pos =
    io.positionIds === false
      ? positionsFromMask(g, ids, mask)
      : g.input({ name: 'position_ids', elemType: DataType.INT64, shape: ['batch_size', 'sequence_length'] });
  const kvShape: Dim[] = ['batch_size', p.numKvHeads, 'past_sequence_length', p.headDim];
  const presentShape: Dim[] = ['batch_size', p.numKvHeads, TOTAL, p.headDim];
  const kvType = io.kv === 'float16' ? DataType.FLOAT16 : DataType.FLOAT;
  const logitsType = io.logits === 'float16' ? DataType.FLOAT16 : DataType.FLOAT;
  // fp16 I/O: inputs are cast to float on the way in, outputs back to half on the way out (compute stays fp32).
  const kvIn = (name: string) => {
    const raw = g.input({ name, elemType: kvType, shape: kvShape });
    return kvType === DataType.FLOAT
      ? raw
      : g.op('Cast', [raw], { name: `${name}/f32`, attrs: { to: int(DataType.FLOAT) } });
  };
  const past: { key: string; value: string }[] = [];
  for (let i = 0; i < p.numLayers; i++)
    past.push({ key: kvIn(`past_key_values.${i}.key`), value: kvIn(`past_key_values.${i}.value`) });
  g.output({ name: 'logits', elemType: logitsType, shape: ['batch_size', 'sequence_length', p.vocabSize] });
  for (let i = 0; i < p.numLayers; i++) {
    g.output({ name: `present.${i}.key`, elemType: kvType, shape: presentShape });
    g.output({ name: `present.${i}.value`, elemType: kvType, shape: presentShape });
  }
  const halfOut = (x: string, out: string) =>
    g.op('Cast', [x], { name: `${out}/f16`, attrs: { to: int(DataType.FLOAT16) }, out });

  const ops = weightOps(g, p, w, dtype);
  const bias = maskBias(g, ids, mask); // (b, 1, 1, s, T)
  const rope = ropeTables(g, p, pos); // (b, 1, s, hd) each

  let x = ops.embed(ids); // (b, s, hidden)
  for (let i = 0; i < p.numLayers; i++) {
    const l = layerPrefix(i);
    const h = rmsNorm(g, p, ops, x, `${l}.input_layernorm`);
    const attn = attention(g, p, ops, h, l, i, past[i], rope, bias, kvType === DataType.FLOAT ? undefined : halfOut);
    x = g.op('Add', [x, attn], { name: `${l}/attn_residual` });
    const h2 = rmsNorm(g, p, ops, x, `${l}.post_attention_layernorm`);
    x = g.op('Add', [x, mlp(g, ops, h2, l)], { name: `${l}/mlp_residual` });
  }
  const hf = rmsNorm(g, p, ops, x, 'model.norm');
  if (logitsType === DataType.FLOAT) ops.lmHead(hf, ids, 'logits');
  else halfOut(ops.lmHead(hf, ids, 'logits_f32'), 'logits');

  return {
    irVersion: 8,
    opsets:
      dtype === 'fp32' || dtype === 'fp16'
        ? [{ domain: '', version: 17 }]
        : [
            { domain: '', version: 17 },
            { domain: 'com.microsoft', version: 1 },
          ],
    producerName: 'edge-infer model-make',
    producerVersion: '1',
    graph: g.graph(`llama-${dtype}`),
  };
}

/** Causal + padding mask as an additive bias: key j visible to query i iff mask[b, j] && j <= past + i. */
function maskBias(g: GraphBuilder, ids: string, mask: string): string {
  const n = 'mask';
  const total = g.op('Shape', [mask], { name: `${n}/total`, attrs: { start: int(1), end: int(2) } }); // (1) T
  const seq = g.op('Shape', [ids], { name: `${n}/seq`, attrs: { start: int(1), end: int(2) } }); // (1) s
  const pastLen = g.op('Sub', [total, seq], { name: `${n}/past` }); // (1) P
  const axis0 = g.i64([0]);
  const totalS = g.op('Squeeze', [total, axis0], { name: `${n}/total_s` });
  const pastS = g.op('Squeeze', [pastLen, axis0], { name: `${n}/past_s` });
  const zero = g.i64([0], true);
  const one = g.i64([1], true);
  const keyPos = g.op('Range', [zero, totalS, one], { name: `${n}/key_pos` }); // (T)
  const queryPos = g.op('Range', [pastS, totalS, one], { name: `${n}/query_pos` }); // (s) past + i
  const queryCol = g.op('Unsqueeze', [queryPos, g.i64([1])], { name: `${n}/query_col` }); // (s, 1)
  const future = g.op('Less', [queryCol, keyPos], { name: `${n}/future` }); // (s, T) past + i < j
  const causal = g.op('Not', [future], { name: `${n}/causal` });
  const real = g.op('Cast', [mask], { name: `${n}/real`, attrs: { to: int(DataType.BOOL) } }); // (b, T)
  const real3 = g.op('Unsqueeze', [real, g.i64([1])], { name: `${n}/real3` }); // (b, 1, T)
  const visible = g.op('And', [causal, real3], { name: `${n}/visible` }); // (b, s, T)
  const bias = g.op('Where', [visible, g.f32(0, 'zero'), g.f32(MASK_NEG, 'mask_neg')], { name: `${n}/bias` });
  return g.op('Unsqueeze', [bias, g.i64([1, 2])], { name: `${n}/bias5` }); // (b, 1, 1, s, T)
}

/** position of new token i = (ones in attention_mask up to its slot) - 1: the last s columns of cumsum(mask) - 1. */
function positionsFromMask(g: GraphBuilder, ids: string, mask: string): string {
  const n = 'positions';
  const counted = g.op('CumSum', [mask, g.i64([1], true)], { name: `${n}/cumsum` }); // (b, T)
  const all = g.op('Sub', [counted, g.i64([1], true)], { name: `${n}/minus1` });
  const seq = g.op('Shape', [ids], { name: `${n}/seq`, attrs: { start: int(1), end: int(2) } }); // (1) s
  const start = g.op('Neg', [seq], { name: `${n}/start` });
  return g.op('Slice', [all, start, g.i64([2 ** 53]), g.i64([1])], { name: `${n}/last_s` }); // (b, s)
}

interface Rope {
  cos: string;
  sin: string;
}

function ropeTables(g: GraphBuilder, p: LlamaShape, pos: string): Rope {
  const n = 'rope';
  const invFreq = g.initializer({
    name: 'rope.inv_freq',
    dataType: DataType.FLOAT,
    dims: [p.headDim / 2],
    data: ropeInvFreq(p),
  });
  const posF = g.op('Cast', [pos], { name: `${n}/pos_f`, attrs: { to: int(DataType.FLOAT) } }); // (b, s)
  const pos3 = g.op('Unsqueeze', [posF, g.i64([2])], { name: `${n}/pos3` }); // (b, s, 1)
  const freqs = g.op('Mul', [pos3, invFreq], { name: `${n}/freqs` }); // (b, s, hd/2)
  const angle = g.op('Concat', [freqs, freqs], { name: `${n}/angle`, attrs: { axis: int(-1) } }); // (b, s, hd)
  const heads = g.i64([1]);
  const cos = g.op('Unsqueeze', [g.op('Cos', [angle], { name: `${n}/cos3` }), heads], { name: `${n}/cos` }); // (b, 1, s, hd)
  const sin = g.op('Unsqueeze', [g.op('Sin', [angle], { name: `${n}/sin3` }), heads], { name: `${n}/sin` });
  return { cos, sin };
}

/** x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x[hd/2:], x[:hd/2]); x is (b, heads, s, hd). */
function applyRope(g: GraphBuilder, p: LlamaShape, x: string, rope: Rope, name: string): string {
  const half = p.headDim / 2;
  const axis = g.i64([3]);
  const x1 = g.op('Slice', [x, g.i64([0]), g.i64([half]), axis], { name: `${name}/x1` });
  const x2 = g.op('Slice', [x, g.i64([half]), g.i64([p.headDim]), axis], { name: `${name}/x2` });
  const rot = g.op('Concat', [g.op('Neg', [x2], { name: `${name}/neg` }), x1], {
    name: `${name}/rot`,
    attrs: { axis: int(-1) },
  });
  const a = g.op('Mul', [x, rope.cos], { name: `${name}/xcos` });
  const b = g.op('Mul', [rot, rope.sin], { name: `${name}/rsin` });
  return g.op('Add', [a, b], { name });
}

function rmsNorm(g: GraphBuilder, p: LlamaShape, ops: WeightOps, x: string, name: string): string {
  const sq = g.op('Mul', [x, x], { name: `${name}/sq` });
  const ms = g.op('ReduceMean', [sq], { name: `${name}/mean`, attrs: { axes: ints([-1]), keepdims: int(1) } });
  const eps = g.op('Add', [ms, g.f32(p.rmsNormEps, 'rms_eps')], { name: `${name}/eps` });
  const rms = g.op('Sqrt', [eps], { name: `${name}/rms` });
  const xn = g.op('Div', [x, rms], { name: `${name}/normed` });
  return g.op('Mul', [xn, ops.vector(`${name}.weight`)], { name });
}

function attention(
  g: GraphBuilder,
  p: LlamaShape,
  ops: WeightOps,
  h: string,
  l: string,
  i: number,
  past: { key: string; value: string },
  rope: Rope,
  bias: string,
  /** Set for fp16 present outputs: casts the float present to the named half output. */
  halfOut?: (x: string, out: string) => string,
): string {
  const a = `${l}.self_attn`;
  const hd = p.headDim;
  const group = p.numHeads / p.numKvHeads;
  const toHeads = (t: string, heads: number, name: string) => {
    const r = g.op('Reshape', [t, g.i64([0, 0, heads, hd])], { name: `${name}/split` }); // (b, s, heads, hd)
    return g.op('Transpose', [r], { name: `${name}/heads`, attrs: { perm: ints([0, 2, 1, 3]) } }); // (b, heads, s, hd)
  };
  const q = applyRope(g, p, toHeads(ops.linear(h, `${a}.q_proj.weight`), p.numHeads, `${a}/q`), rope, `${a}/q_rope`);
  const k = applyRope(g, p, toHeads(ops.linear(h, `${a}.k_proj.weight`), p.numKvHeads, `${a}/k`), rope, `${a}/k_rope`);
  const v = toHeads(ops.linear(h, `${a}.v_proj.weight`), p.numKvHeads, `${a}/v`);
  const axis2 = { axis: int(2) };
  const presentName = (kind: string) => (halfOut ? undefined : `present.${i}.${kind}`);
  const key = g.op('Concat', [past.key, k], { name: `${a}/present_key`, attrs: axis2, out: presentName('key') }); // (b, kv, T, hd)
  const value = g.op('Concat', [past.value, v], {
    name: `${a}/present_value`,
    attrs: axis2,
    out: presentName('value'),
  });
  if (halfOut) {
    halfOut(key, `present.${i}.key`);
    halfOut(value, `present.${i}.value`);
  }

  // GQA without copying K/V: query heads grouped by the kv head they share, broadcast over the group.
  const q5 = g.op('Reshape', [q, g.i64([0, p.numKvHeads, group, -1, hd])], { name: `${a}/q_groups` }); // (b, kv, g, s, hd)
  const kT = g.op('Transpose', [key], { name: `${a}/k_t`, attrs: { perm: ints([0, 1, 3, 2]) } }); // (b, kv, hd, T)
  const kT5 = g.op('Unsqueeze', [kT, g.i64([2])], { name: `${a}/k_t5` }); // (b, kv, 1, hd, T)
  const scores = g.op('MatMul', [q5, kT5], { name: `${a}/scores` }); // (b, kv, g, s, T)
  const scaled = g.op('Mul', [scores, g.f32(1 / Math.sqrt(hd), 'attn_scale')], { name: `${a}/scaled` });
  const masked = g.op('Add', [scaled, bias], { name: `${a}/masked` });
  const probs = g.op('Softmax', [masked], { name: `${a}/probs`, attrs: { axis: int(-1) } });
  const v5 = g.op('Unsqueeze', [value, g.i64([2])], { name: `${a}/v5` }); // (b, kv, 1, T, hd)
  const ctx = g.op('MatMul', [probs, v5], { name: `${a}/ctx` }); // (b, kv, g, s, hd)
  const ctx4 = g.op('Reshape', [ctx, g.i64([0, p.numHeads, -1, hd])], { name: `${a}/ctx_heads` }); // (b, heads, s, hd)
  const ctxT = g.op('Transpose', [ctx4], { name: `${a}/ctx_t`, attrs: { perm: ints([0, 2, 1, 3]) } }); // (b, s, heads, hd)
  const ctx3 = g.op('Reshape', [ctxT, g.i64([0, 0, p.numHeads * hd])], { name: `${a}/ctx_merge` }); // (b, s, heads*hd)
  return ops.linear(ctx3, `${a}.o_proj.weight`);
}

function mlp(g: GraphBuilder, ops: WeightOps, h: string, l: string): string {
  const m = `${l}.mlp`;
  const gate = ops.linear(h, `${m}.gate_proj.weight`); // (b, s, I)
  const up = ops.linear(h, `${m}.up_proj.weight`);
  const silu = g.op('Mul', [gate, g.op('Sigmoid', [gate], { name: `${m}/sigmoid` })], { name: `${m}/silu` });
  const act = g.op('Mul', [silu, up], { name: `${m}/act` });
  return ops.linear(act, `${m}.down_proj.weight`); // (b, s, hidden)
}

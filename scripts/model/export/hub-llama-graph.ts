// A Llama decoder shaped like the hub's onnx/ exports of it (optimum's torch.onnx export of transformers'
// LlamaForCausalLM with SDPA attention, then transformers.js' quantisers), for the same weights our own
// graph (../llama-graph.ts) holds. Same inputs and outputs as ours; inside, the exporter's ops and names:
//   embedding   Gather(model.embed_tokens.weight, input_ids)
//   mask        ConstantOfShape(min) -> Trilu(k=1) -> Mul(arange(T) > cache_position) -> Expand to (b, 1, s, T)
//               -> Where(causal + attention_mask == 0, min, causal); min = the type's lowest finite value
//   rotary      inv_freq (1, hd/2, 1) -> Expand(b) -> MatMul(·, position_ids as float (b, 1, s)) -> Transpose
//               -> Concat(f, f) -> Cos / Sin -> Mul(1.0) [-> Cast to half]
//   RMSNorm     [Cast f32] Pow(x, 2), ReduceMean(-1), Add(eps), Sqrt, Div(1, ·) | Reciprocal, Mul(x, ·)
//               [Cast half], Mul(weight, ·)
//   attention   q/k/v projections -> Reshape (b, s, -1, hd) -> Transpose (b, h, s, hd); RoPE on q and k:
//               Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, hd/2:)), Slice(x, :hd/2)), sin)); present =
//               Concat(past, ·, axis -2); GQA repeat: Unsqueeze(2), Expand, Reshape; SDPA as torch exports
//               it: MatMul(Mul(q, √scale), Mul(Transpose(k), √scale)), Add(mask), Softmax, MatMul(·, v);
//               Transpose, Reshape (b, s, hidden), o_proj; Add(residual, ·)
//   MLP         gate -> Sigmoid, Mul (SiLU) -> Mul(·, up) -> down; Add(residual, ·)
//   output      final RMSNorm, lm_head MatMul over its own (hidden, vocab) copy -> logits; for feature-extraction
//               (LlamaModel) the final RMSNorm's output as last_hidden_state, no lm_head
// docs/models.md, "The hub's ONNX exports", says per dtype which node feeds which.
import { int, ints } from '../graph-builder.js';
import { DataType, type Dim, type ModelDef } from '../onnx-proto-writer.js';
import type { LlamaShape } from '../presets.js';
import { layerPrefix, ropeInvFreq, type WeightMap } from '../weights.js';
import { ExportGraph } from './export-graph.js';
import { activationType, isDynamic, isNBits, type HubFlavour } from './hub-flavour.js';
import { hubWeightOps, type HubWeightOps } from './hub-weight-ops.js';

const TOTAL: Dim = 'past_sequence_length + sequence_length';
/** torch.finfo(dtype).min, what transformers fills masked scores with. */
const LOWEST: Record<number, number> = { [DataType.FLOAT]: -3.4028234663852886e38, [DataType.FLOAT16]: -65504 };
/** The number torch gives the first folded constant here; any number works, none is meaningful. */
const FIRST_FOLDED_ID = 2071;
/** The end of an open slice (x[..., hd/2:]) as torch writes it. */
const INT64_MAX = 2n ** 63n - 1n;

interface Ctx {
  g: ExportGraph;
  p: LlamaShape;
  f: HubFlavour;
  ops: HubWeightOps;
  /** activation type */
  act: number;
}

/**
 * The export-shaped graph of `flavour`. When `effective` is given it receives every weight as the graph
 * stores it, dequantised, under reference names (lm_head.weight always: the export keeps its own copy).
 */
export function buildHubLlamaModel(p: LlamaShape, w: WeightMap, flavour: HubFlavour, effective?: WeightMap): ModelDef {
  const g = new ExportGraph(FIRST_FOLDED_ID + p.numLayers);
  const act = activationType(flavour.dtype);
  const io = flavour.halfIo ? act : DataType.FLOAT;
  const ctx: Ctx = { g, p, f: flavour, ops: hubWeightOps(g, p, w, flavour, effective), act };
  const ids = g.input({ name: 'input_ids', elemType: DataType.INT64, shape: ['batch_size', 'sequence_length'] });
  const mask = g.input({ name: 'attention_mask', elemType: DataType.INT64, shape: ['batch_size', TOTAL] });
  const pos = g.input({ name: 'position_ids', elemType: DataType.INT64, shape: ['batch_size', 'sequence_length'] });
  const kvShape: Dim[] = ['batch_size', p.numKvHeads, 'past_sequence_length', p.headDim];
  // keep_io_types: float32 at the graph's edge, a Cast to and from half inside (float16.py's names).
  let casts = 0;
  const toAct = (x: string) =>
    io === act
      ? x
      : g.op('Cast', [x], '', {
          name: `graph_input_cast_${casts}`,
          out: `graph_input_cast${casts++}`,
          attrs: { to: int(act) },
        });
  const past = Array.from({ length: p.numLayers }, (_, i) => ({
    key: toAct(g.input({ name: `past_key_values.${i}.key`, elemType: io, shape: kvShape })),
    value: toAct(g.input({ name: `past_key_values.${i}.value`, elemType: io, shape: kvShape })),
  }));
  let outCasts = 0;
  const graphOutput = (x: string | undefined, name: string, shape: Dim[]) => {
    g.output({ name, elemType: io, shape });
    if (x !== undefined)
      g.op('Cast', [x], '', { name: `graph_output_cast_${outCasts++}`, out: name, attrs: { to: int(io) } });
  };
  const presentShape: Dim[] = ['batch_size', p.numKvHeads, TOTAL, p.headDim];

  let x = ctx.ops.embed(ids);
  const bias = causalMask(ctx, ids, mask);
  const rope = rotary(ctx, pos);
  for (let i = 0; i < p.numLayers; i++) {
    const scope = `/model/layers.${i}`;
    const l = layerPrefix(i);
    const h = rmsNorm(ctx, x, `${l}.input_layernorm.weight`, `${scope}/input_layernorm`);
    const present = (kind: 'key' | 'value') => (io === act ? `present.${i}.${kind}` : undefined);
    const a = attention(ctx, h, i, past[i], rope, bias, present);
    if (io !== act) {
      graphOutput(a.key, `present.${i}.key`, presentShape);
      graphOutput(a.value, `present.${i}.value`, presentShape);
    } else {
      g.output({ name: `present.${i}.key`, elemType: io, shape: presentShape });
      g.output({ name: `present.${i}.value`, elemType: io, shape: presentShape });
    }
    x = g.op('Add', [x, a.out], scope);
    const h2 = rmsNorm(ctx, x, `${l}.post_attention_layernorm.weight`, `${scope}/post_attention_layernorm`);
    x = g.op('Add', [x, mlp(ctx, h2, i)], scope);
  }
  const hf = rmsNorm(ctx, x, 'model.norm.weight', '/model/norm');
  const logitsShape: Dim[] = ['batch_size', 'sequence_length', p.vocabSize];
  if (flavour.task === 'feature-extraction') {
    const hiddenShape: Dim[] = ['batch_size', 'sequence_length', p.hiddenSize];
    if (io === act) {
      g.op('Identity', [hf], '/model', { out: 'last_hidden_state' });
      g.output({ name: 'last_hidden_state', elemType: io, shape: hiddenShape });
    } else graphOutput(hf, 'last_hidden_state', hiddenShape);
  } else if (io === act) {
    ctx.ops.linear(hf, 'lm_head.weight', '/lm_head', 'logits');
    g.output({ name: 'logits', elemType: io, shape: logitsShape });
  } else graphOutput(ctx.ops.linear(hf, 'lm_head.weight', '/lm_head'), 'logits', logitsShape);

  const quantDomain = isNBits(flavour.dtype) ? [{ domain: 'com.microsoft', version: 1 }] : [];
  return {
    irVersion: 8,
    opsets: [{ domain: '', version: 17 }, ...quantDomain],
    // quantize_dynamic stamps its own producer; the 4-bit quantiser and the fp16 converter keep torch's.
    producerName: isDynamic(flavour.dtype) ? 'onnx.quantize' : 'pytorch',
    producerVersion: isDynamic(flavour.dtype) ? '0.1.0' : '2.5.1',
    graph: g.graph('main_graph'),
  };
}

/** Dimension `index` of x's shape as a 1-element int64 tensor (Shape, Gather, Unsqueeze as traced). */
function dim(g: ExportGraph, x: string, index: number, scope: string): string {
  const shape = g.op('Shape', [x], scope);
  const d = g.op('Gather', [shape, g.i64(scope, [index], true)], scope, { attrs: { axis: int(0) } });
  return g.op('Unsqueeze', [d, g.i64(scope, [0])], scope);
}

/** transformers' 4-D float mask (b, 1, s, T): 0 where visible, the type's lowest value elsewhere. */
function causalMask({ g, act }: Ctx, ids: string, mask: string): string {
  const s = '/model';
  const seq = dim(g, ids, 1, s);
  const total = dim(g, mask, 1, s);
  const past = g.op('Sub', [total, seq], s);
  const scalar = (t: string) => g.op('Squeeze', [t, g.i64(s, [0])], s);
  const cachePosition = g.op('Range', [scalar(past), scalar(total), g.i64(s, [1], true)], s); // (s) past + i
  const lowest = { kind: 'tensor' as const, v: { name: '', dataType: act, dims: [1], data: lowestOf(act) } };
  const full = g.op('ConstantOfShape', [g.op('Concat', [seq, total], s, { attrs: { axis: int(0) } })], s, {
    attrs: { value: lowest },
  });
  const upper = g.op('Trilu', [full, g.i64(s, [1], true)], s, { attrs: { upper: int(1) } }); // (s, T)
  const keys = g.op('Range', [g.i64(s, [0], true), scalar(total), g.i64(s, [1], true)], s); // (T)
  const future = g.op('Greater', [keys, g.op('Reshape', [cachePosition, g.i64(s, [-1, 1])], s)], s); // (s, T)
  const causal = g.op('Mul', [upper, g.op('Cast', [future], s, { attrs: { to: int(act) } })], s);
  const causal4 = g.op('Unsqueeze', [causal, g.i64(s, [0, 1])], s); // (1, 1, s, T)
  const batch = dim(g, ids, 0, s);
  const shape = g.op('Concat', [batch, g.i64(s, [1]), g.i64(s, [1]), g.i64(s, [1])], s, { attrs: { axis: int(0) } });
  const expanded = g.op('Expand', [causal4, shape], s); // (b, 1, s, T)
  const keep = g.op('Cast', [g.op('Unsqueeze', [mask, g.i64(s, [1, 2])], s)], s, { attrs: { to: int(act) } });
  const padding = g.op('Equal', [g.op('Add', [expanded, keep], s), g.scalar(s, 0, act)], s);
  return g.op('Where', [padding, g.scalar(s, LOWEST[act], act), expanded], s);
}

function lowestOf(act: number): Float32Array | Uint16Array {
  return act === DataType.FLOAT16 ? Uint16Array.of(0xfbff) : Float32Array.of(LOWEST[act]);
}

interface Rope {
  cos: string;
  sin: string;
}

/** cos/sin (b, s, hd) of position_ids, computed in float32 as transformers does, then cast to the activation type. */
function rotary({ g, p, f, act }: Ctx, pos: string): Rope {
  const s = '/model/rotary_emb';
  const half = p.headDim / 2;
  let invFreq: string; // (1, hd/2, 1)
  if (f.rope === 'computed') {
    const even = g.op('Range', [g.i64(s, [0], true), g.i64(s, [p.headDim], true), g.i64(s, [2], true)], s);
    const ratio = g.op(
      'Div',
      [g.op('Cast', [even], s, { attrs: { to: int(DataType.FLOAT) } }), g.scalar(s, p.headDim, DataType.FLOAT)],
      s,
    );
    const inv = g.op(
      'Div',
      [g.scalar(s, 1, DataType.FLOAT), g.op('Pow', [g.scalar(s, p.ropeTheta, DataType.FLOAT), ratio], s)],
      s,
    );
    invFreq = g.op('Unsqueeze', [inv, g.i64(s, [0, 2])], s);
  } else {
    const t = { dataType: DataType.FLOAT, dims: [1, half, 1], data: ropeInvFreq(p) };
    invFreq = f.rope === 'folded' ? g.fold('Expand', t) : g.constant(s, t);
  }
  const shape = g.op('Concat', [dim(g, pos, 0, s), g.i64(s, [1]), g.i64(s, [1])], s, { attrs: { axis: int(0) } });
  const expanded = g.op('Expand', [invFreq, shape], s); // (b, hd/2, 1)
  const positions = g.op('Cast', [g.op('Unsqueeze', [pos, g.i64(s, [1])], s)], s, {
    attrs: { to: int(DataType.FLOAT) },
  });
  const freqs = g.op('MatMul', [expanded, positions], s); // (b, hd/2, s)
  const t = g.op('Transpose', [freqs], s, { attrs: { perm: ints([0, 2, 1]) } }); // (b, s, hd/2)
  const angle = g.op('Concat', [t, t], s, { attrs: { axis: int(-1) } }); // (b, s, hd)
  const scaled = (trig: 'Cos' | 'Sin') => {
    const v = g.op('Mul', [g.op(trig, [angle], s), g.scalar(s, 1, DataType.FLOAT)], s); // attention_scaling 1.0
    return act === DataType.FLOAT ? v : g.op('Cast', [v], s, { attrs: { to: int(act) } });
  };
  return { cos: scaled('Cos'), sin: scaled('Sin') };
}

function rmsNorm({ g, p, f, ops, act }: Ctx, x: string, weight: string, s: string): string {
  const x32 = act === DataType.FLOAT ? x : g.op('Cast', [x], s, { attrs: { to: int(DataType.FLOAT) } });
  const squares = g.op('Pow', [x32, g.scalar(s, 2, DataType.FLOAT)], s);
  const mean = g.op('ReduceMean', [squares], s, { attrs: { axes: ints([-1]), keepdims: int(1) } });
  const root = g.op('Sqrt', [g.op('Add', [mean, g.scalar(s, p.rmsNormEps, DataType.FLOAT)], s)], s);
  const inv =
    f.rsqrt === 'div' ? g.op('Div', [g.scalar(s, 1, DataType.FLOAT), root], s) : g.op('Reciprocal', [root], s);
  const normed = g.op('Mul', [x32, inv], s);
  const back = act === DataType.FLOAT ? normed : g.op('Cast', [normed], s, { attrs: { to: int(act) } });
  return g.op('Mul', [ops.norm(weight), back], s);
}

/** x*cos + rotate_half(x)*sin on x (b, heads, s, hd), cos/sin already (b, 1, s, hd). */
function applyRope({ g, p }: Ctx, x: string, cos: string, sin: string, s: string): string {
  const half = p.headDim / 2;
  const axis = g.i64(s, [3]);
  const x1 = g.op('Slice', [x, g.i64(s, [0]), g.i64(s, [half]), axis, g.i64(s, [1])], s);
  const x2 = g.op('Slice', [x, g.i64(s, [half]), g.i64(s, [INT64_MAX]), axis, g.i64(s, [1])], s);
  const rotated = g.op('Concat', [g.op('Neg', [x2], s), x1], s, { attrs: { axis: int(-1) } });
  return g.op('Add', [g.op('Mul', [x, cos], s), g.op('Mul', [rotated, sin], s)], s);
}

function attention(
  ctx: Ctx,
  h: string,
  i: number,
  past: { key: string; value: string },
  rope: Rope,
  bias: string,
  /** the present outputs' names when they are graph outputs as they are (undefined: a Cast follows) */
  present: (kind: 'key' | 'value') => string | undefined,
): { out: string; key: string; value: string } {
  const { g, p, ops, act } = ctx;
  const s = `/model/layers.${i}/self_attn`;
  const w = `${layerPrefix(i)}.self_attn`;
  const hd = p.headDim;
  const group = p.numHeads / p.numKvHeads;
  const q = ops.linear(h, `${w}.q_proj.weight`, `${s}/q_proj`);
  const k = ops.linear(h, `${w}.k_proj.weight`, `${s}/k_proj`);
  const v = ops.linear(h, `${w}.v_proj.weight`, `${s}/v_proj`);
  const split = g.op('Concat', [dim(g, h, 0, s), dim(g, h, 1, s), g.i64(s, [-1]), g.i64(s, [hd])], s, {
    attrs: { axis: int(0) },
  }); // (b, s, -1, hd)
  const heads = (t: string) =>
    g.op('Transpose', [g.op('Reshape', [t, split], s)], s, { attrs: { perm: ints([0, 2, 1, 3]) } });
  const cos = g.op('Unsqueeze', [rope.cos, g.i64(s, [1])], s);
  const sin = g.op('Unsqueeze', [rope.sin, g.i64(s, [1])], s);
  const qr = applyRope(ctx, heads(q), cos, sin, s);
  const kr = applyRope(ctx, heads(k), cos, sin, s);
  const axis = { axis: int(-2) };
  const key = g.op('Concat', [past.key, kr], s, { attrs: axis, out: present('key') }); // (b, kv, T, hd)
  const value = g.op('Concat', [past.value, heads(v)], s, { attrs: axis, out: present('value') });
  const repeat = (t: string) => {
    if (group === 1) return t;
    const e = g.op('Expand', [g.op('Unsqueeze', [t, g.i64(s, [2])], s), g.i64(s, [1, 1, group, 1, 1])], s);
    return g.op('Reshape', [e, g.i64(s, [0, p.numHeads, -1, hd])], s); // (b, heads, T, hd)
  };
  const root = Math.sqrt(1 / Math.sqrt(hd));
  const kT = g.op('Transpose', [repeat(key)], s, { attrs: { perm: ints([0, 1, 3, 2]) } });
  const scores = g.op(
    'MatMul',
    [g.op('Mul', [qr, g.scalar(s, root, act)], s), g.op('Mul', [kT, g.scalar(s, root, act)], s)],
    s,
  );
  const probs = g.op('Softmax', [g.op('Add', [scores, bias], s)], s, { attrs: { axis: int(-1) } });
  const ctxHeads = g.op('MatMul', [probs, repeat(value)], s); // (b, heads, s, hd)
  const merged = g.op('Transpose', [ctxHeads], s, { attrs: { perm: ints([0, 2, 1, 3]) } });
  const shape = g.op('Concat', [dim(g, h, 0, s), dim(g, h, 1, s), g.i64(s, [-1])], s, { attrs: { axis: int(0) } });
  const flat = g.op('Reshape', [merged, shape], s); // (b, s, hidden)
  return { out: ops.linear(flat, `${w}.o_proj.weight`, `${s}/o_proj`), key, value };
}

function mlp({ g, ops }: Ctx, h: string, i: number): string {
  const s = `/model/layers.${i}/mlp`;
  const w = `${layerPrefix(i)}.mlp`;
  const gate = ops.linear(h, `${w}.gate_proj.weight`, `${s}/gate_proj`);
  const silu = g.op('Mul', [gate, g.op('Sigmoid', [gate], `${s}/act_fn`)], `${s}/act_fn`);
  const up = ops.linear(h, `${w}.up_proj.weight`, `${s}/up_proj`);
  return ops.linear(g.op('Mul', [silu, up], s), `${w}.down_proj.weight`, `${s}/down_proj`);
}

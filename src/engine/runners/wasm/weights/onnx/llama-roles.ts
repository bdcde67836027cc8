import { UnsupportedByKernels } from '../../../../formats/unsupported.js';
import type { OnnxNode } from '../../../../formats/onnx/onnx-node.js';

/**
 * One weight matrix as a graph multiplies it, named by the tensors that hold it:
 *   MatMul      w (K, N), or (N, K) when the graph transposes it (`transposed`)
 *   Gemm        w (N, K) with transB = 1, else (K, N)
 *   MatMulNBits w = B (N, K / block, block * bits / 8), scales, optional zero points (onnxruntime's contrib op)
 *   MatMulInteger  w (K, N) int8 / uint8, per-tensor or per-column scale and zero point (quantize_dynamic)
 *   Gather      an embedding table (N = vocab, K = hidden); `scales` for our 8-bit tables (rows minus 128)
 */
export interface MatrixSource {
  op: 'MatMul' | 'Gemm' | 'MatMulNBits' | 'MatMulInteger' | 'Gather';
  w: string;
  scales?: string;
  zeroPoints?: string;
  transposed: boolean;
  /** MatMulNBits: K, N, bits, block_size. */
  nbits?: { k: number; n: number; bits: number; blockSize: number };
  /**
   * A quantised Gather table: `blocks` ours (uint8 rows of blocks of 32 minus 128, times block scales
   * gathered beside them), `linear` quantize_dynamic's (DequantizeLinear of the gathered rows: a scale and
   * zero point for the whole table).
   */
  table?: 'blocks' | 'linear';
}

export interface LayerSources {
  attnNorm: string;
  q: MatrixSource;
  k: MatrixSource;
  v: MatrixSource;
  o: MatrixSource;
  mlpNorm: string;
  gate: MatrixSource;
  up: MatrixSource;
  down: MatrixSource;
}

/** Every weight of a Llama decoder, found by what the graph does with it. */
export interface LlamaSources {
  embedding: MatrixSource;
  layers: LayerSources[];
  norm: string;
  lmHead: MatrixSource;
}

/** Ops that pass a value on unchanged in what it means (a cast, a reshape of the same numbers). */
const PASS = new Set(['Cast', 'Reshape', 'Identity', 'Squeeze', 'Unsqueeze', 'Flatten']);
/** Ops an RMSNorm is built of, when the exporter spells it out. */
const NORM_OPS = new Set(['Pow', 'Mul', 'ReduceMean', 'Add', 'Sqrt', 'Div', 'Reciprocal', 'Cast']);
/** Graph inputs of the decoder interface (docs/models.md): never weights. */
const isGraphInput = (v: string): boolean =>
  v === 'input_ids' || v === 'attention_mask' || v === 'position_ids' || v.startsWith('past_key_values.');

/** A matrix product as a unit: what it multiplies (x), what it gives (out), and the weight's tensors. */
interface Unit {
  x: string;
  out: string;
  source: MatrixSource;
}

class Graph {
  readonly producer = new Map<string, OnnxNode>();
  readonly consumers = new Map<string, OnnxNode[]>();
  readonly units: Unit[] = [];

  constructor(readonly nodes: readonly OnnxNode[]) {
    for (const node of nodes) {
      for (const out of node.outputs) this.producer.set(out, node);
      for (const input of node.inputs) {
        if (!input) continue;
        const list = this.consumers.get(input) ?? [];
        list.push(node);
        this.consumers.set(input, list);
      }
    }
    for (const node of nodes) {
      const unit = this.unitOf(node);
      if (unit) this.units.push(unit);
    }
  }

  /** A tensor the graph holds (an initializer), not computed and not fed. */
  isConst(v: string): boolean {
    if (!v || isGraphInput(v)) return false;
    const p = this.producer.get(v);
    return p === undefined || p.op === 'Constant';
  }

  /** The constant behind `v` through casts (fp16 weights cast up), and whether a Transpose flipped it. */
  constBehind(v: string): { name: string; transposed: boolean } | undefined {
    let transposed = false;
    for (let hops = 0; hops < 4; hops++) {
      if (this.isConst(v)) return { name: v, transposed };
      const p = this.producer.get(v);
      if (!p) return undefined;
      if (p.op === 'Transpose') transposed = !transposed;
      else if (p.op !== 'Cast') return undefined;
      v = p.inputs[0];
    }
    return undefined;
  }

  private unitOf(node: OnnxNode): Unit | undefined {
    const out = node.outputs[0];
    if (node.op === 'MatMul') {
      const w = this.constBehind(node.inputs[1]);
      if (!w) return undefined;
      return { x: node.inputs[0], out, source: { op: 'MatMul', w: w.name, transposed: w.transposed } };
    }
    if (node.op === 'Gemm') {
      const w = this.constBehind(node.inputs[1]);
      if (!w) return undefined;
      if (node.inputs[2]) throw new UnsupportedByKernels(`Gemm ${node.name} has a bias`);
      const transB = node.attrs.get('transB') === 1;
      return { x: node.inputs[0], out, source: { op: 'Gemm', w: w.name, transposed: transB !== w.transposed } };
    }
    if (node.op === 'MatMulNBits') {
      const [x, b, scales, zp, gIdx, bias] = node.inputs;
      if (gIdx || bias) throw new UnsupportedByKernels(`MatMulNBits ${node.name} has g_idx or a bias`);
      const attr = (name: string): number => {
        const v = node.attrs.get(name);
        if (typeof v !== 'number') throw new UnsupportedByKernels(`MatMulNBits ${node.name} has no ${name}`);
        return v;
      };
      const nbits = { k: attr('K'), n: attr('N'), bits: attr('bits'), blockSize: attr('block_size') };
      const source: MatrixSource = { op: 'MatMulNBits', w: b, scales, transposed: true, nbits };
      if (zp) source.zeroPoints = zp;
      return { x, out, source };
    }
    if (node.op === 'MatMulInteger') {
      // quantize_dynamic: DynamicQuantizeLinear(x) -> MatMulInteger(xq, W, x_zp, W_zp) -> Cast -> Mul(s) with
      // s = x_scale * W_scale: the unit runs from x to that Mul, and its weight scale is the constant in s.
      const dql = this.producer.get(node.inputs[0]);
      if (dql?.op !== 'DynamicQuantizeLinear') return undefined;
      const cast = this.only(node.outputs[0], 'Cast');
      const mul = cast && this.only(cast.outputs[0], 'Mul');
      const scaleNode = mul && this.producer.get(mul.inputs.find((i) => i !== cast.outputs[0]) ?? '');
      const wScale = scaleNode?.op === 'Mul' ? scaleNode.inputs.find((i) => this.isConst(i)) : undefined;
      if (!mul || !wScale)
        throw new UnsupportedByKernels(`MatMulInteger ${node.name} is not quantize_dynamic's pattern`);
      const source: MatrixSource = { op: 'MatMulInteger', w: node.inputs[1], scales: wScale, transposed: false };
      if (node.inputs[3]) source.zeroPoints = node.inputs[3];
      return { x: dql.inputs[0], out: mul.outputs[0], source };
    }
    return undefined;
  }

  /** The one consumer of `v`, if it has exactly one and it is an `op`. */
  only(v: string, op: string): OnnxNode | undefined {
    const list = this.consumers.get(v) ?? [];
    return list.length === 1 && list[0].op === op ? list[0] : undefined;
  }

  /** `v` and every value reached from it through PASS ops. */
  forward(v: string): string[] {
    const out = [v];
    for (let i = 0; i < out.length; i++)
      for (const c of this.consumers.get(out[i]) ?? []) if (PASS.has(c.op)) out.push(...c.outputs);
    return out;
  }

  /** The matrix products that multiply `v` (directly or through PASS ops). */
  unitsOn(v: string): Unit[] {
    const values = new Set(this.forward(v));
    return this.units.filter((u) => values.has(u.x));
  }

  /** The unit whose output reaches `v` through PASS ops, if any. */
  unitBehind(v: string): Unit | undefined {
    for (let hops = 0; hops < 6 && v; hops++) {
      const unit = this.units.find((u) => u.out === v);
      if (unit) return unit;
      const p = this.producer.get(v);
      if (!p || !PASS.has(p.op)) return undefined;
      v = p.inputs[0];
    }
    return undefined;
  }
}

/** RMSNorm of `x`: its weight (the constant of the last Mul) and its output. */
function rmsNorm(g: Graph, x: string, what: string): { weight: string; out: string } {
  for (const c of g.consumers.get(x) ?? []) {
    if (c.op === 'SimplifiedLayerNormalization' && g.isConst(c.inputs[1]))
      return { weight: c.inputs[1], out: c.outputs[0] };
    if (c.op === 'SkipSimplifiedLayerNormalization')
      throw new UnsupportedByKernels(`${what}: fused SkipSimplifiedLayerNormalization is not read yet`);
  }
  // Breadth first through the ops a spelled-out RMSNorm uses; a residual Add (two computed inputs) is not one.
  const seen = new Set<OnnxNode>();
  let frontier = [x];
  for (let depth = 0; depth < 10 && frontier.length; depth++) {
    const next: string[] = [];
    for (const v of frontier) {
      for (const c of g.consumers.get(v) ?? []) {
        if (seen.has(c) || !NORM_OPS.has(c.op)) continue;
        seen.add(c);
        const weight = c.op === 'Mul' ? c.inputs.find((i) => g.isConst(i)) : undefined;
        if (weight) return { weight, out: c.outputs[0] };
        if (c.op === 'Add' && !c.inputs.some((i) => g.isConst(i))) continue;
        next.push(...c.outputs);
      }
    }
    frontier = next;
  }
  throw new UnsupportedByKernels(`${what}: no RMSNorm (Mul by a weight vector after ReduceMean, Sqrt) follows it`);
}

/** The residual Add that adds a matrix product's output to `residual`: the product, and the sum. */
function residualAdd(g: Graph, residual: string, what: string): { unit: Unit; out: string } {
  for (const v of g.forward(residual)) {
    for (const c of g.consumers.get(v) ?? []) {
      if (c.op !== 'Add') continue;
      const other = c.inputs[0] === v ? c.inputs[1] : c.inputs[0];
      const unit = g.unitBehind(other);
      if (unit) return { unit, out: c.outputs[0] };
    }
  }
  throw new UnsupportedByKernels(`${what}: no residual Add of a projection follows it`);
}

/**
 * Whether a projection's output becomes a layer's cached key or value: it meets `past_key_values.{i}.key|value`
 * (Concat onto the past) or `present.{i}.key|value`, before any attention product (MatMul of two computed
 * values) or Softmax. Undefined for the query.
 */
function cacheRole(g: Graph, out: string): 'key' | 'value' | undefined {
  const seen = new Set<OnnxNode>();
  let frontier = [out];
  for (let depth = 0; depth < 16 && frontier.length; depth++) {
    const next: string[] = [];
    for (const v of frontier) {
      const m = /^present\.\d+\.(key|value)$/.exec(v);
      if (m) return m[1] as 'key' | 'value';
      for (const c of g.consumers.get(v) ?? []) {
        if (seen.has(c)) continue;
        seen.add(c);
        if (c.op === 'GroupQueryAttention' || c.op === 'MultiHeadAttention') {
          const slot = c.inputs.indexOf(v);
          if (slot === 1) return 'key';
          if (slot === 2) return 'value';
          continue;
        }
        const past = c.inputs.map((i) => /^past_key_values\.\d+\.(key|value)$/.exec(i)).find((m2) => m2);
        if (past) return past[1] as 'key' | 'value';
        if (c.op === 'Softmax' || (c.op === 'MatMul' && !c.inputs.some((i) => g.constBehind(i)))) continue;
        next.push(...c.outputs);
      }
    }
    frontier = next;
  }
  return undefined;
}

/** Whether a product's output goes through a sigmoid (SiLU = x * sigmoid(x)): the MLP's gate. */
function isGate(g: Graph, out: string): boolean {
  return g
    .forward(out)
    .some((v) => (g.consumers.get(v) ?? []).some((c) => ['Sigmoid', 'Silu', 'Swish', 'QuickGelu'].includes(c.op)));
}

/** The embedding lookup: the Gather of `input_ids` from a constant table, and the residual stream it starts. */
function embedding(g: Graph): { source: MatrixSource; out: string } {
  const gathers = g
    .forward('input_ids')
    .flatMap((v) => (g.consumers.get(v) ?? []).filter((c) => c.op === 'Gather' && c.inputs[1] === v));
  const table = gathers.find(
    (n) => g.constBehind(n.inputs[0]) && (g.consumers.get(n.outputs[0]) ?? []).every((c) => c.op !== 'Unsqueeze'),
  );
  if (!table) throw new UnsupportedByKernels('no Gather of input_ids from a weight table (the embedding)');
  const source: MatrixSource = { op: 'Gather', w: g.constBehind(table.inputs[0])!.name, transposed: true };
  // Our 8-bit tables: rows gathered as uint8, cast, minus 128, times the row's block scales gathered beside them.
  const scaleGather = gathers.find((n) => n !== table && g.isConst(n.inputs[0]));
  const dql = g.only(table.outputs[0], 'DequantizeLinear');
  if (scaleGather) {
    source.scales = scaleGather.inputs[0];
    source.table = 'blocks';
  } else if (dql && g.isConst(dql.inputs[1])) {
    source.scales = dql.inputs[1];
    if (dql.inputs[2]) source.zeroPoints = dql.inputs[2];
    source.table = 'linear';
  }
  // The stream starts where the lookup's value is used twice (the first RMSNorm and the first residual Add).
  let out = table.outputs[0];
  for (let hops = 0; hops < 8; hops++) {
    const users = g.consumers.get(out) ?? [];
    if (users.length !== 1) break;
    out = users[0].outputs[0];
  }
  return { source, out };
}

/**
 * Finds every weight of a Llama decoder by walking its graph from input_ids: the embedding, then per layer
 * the attention RMSNorm, the three products on its output (the key and value are those that reach the
 * KV cache, the query the one that does not), the output projection (the product added back to the
 * residual), the MLP RMSNorm, gate (the product under a sigmoid) and up, down; then the final RMSNorm
 * and the output projection. Names of initializers and nodes are never read. Refuses, naming what is
 * missing, any graph that does not compute that (UnsupportedByKernels).
 */
export function findLlamaSources(nodes: readonly OnnxNode[], numLayers: number): LlamaSources {
  const g = new Graph(nodes);
  const embed = embedding(g);
  let residual = embed.out;
  const layers: LayerSources[] = [];
  for (let i = 0; i < numLayers; i++) {
    const at = `layer ${i}`;
    const attnNorm = rmsNorm(g, residual, `${at}: the residual stream`);
    const qkv = g.unitsOn(attnNorm.out);
    if (qkv.length === 1) throw new UnsupportedByKernels(`${at}: a fused QKV projection is not read yet`);
    if (qkv.length !== 3)
      throw new UnsupportedByKernels(`${at}: ${qkv.length} products on the attention input, expected q, k, v`);
    const roles = qkv.map((u) => cacheRole(g, u.out));
    const k = qkv[roles.indexOf('key')];
    const v = qkv[roles.indexOf('value')];
    const q = qkv[roles.indexOf(undefined)];
    if (!k || !v || !q) throw new UnsupportedByKernels(`${at}: cannot tell q, k and v apart by where they go`);
    for (const u of qkv)
      if ((g.consumers.get(u.out) ?? []).some((c) => c.op === 'Add' && c.inputs.some((x) => g.isConst(x))))
        throw new UnsupportedByKernels(`${at}: q/k/v projections with biases (Qwen2) are not computed by the kernels`);
    const attn = residualAdd(g, residual, `${at}: attention`);
    const mlpNorm = rmsNorm(g, attn.out, `${at}: after attention`);
    const gateUp = g.unitsOn(mlpNorm.out);
    if (gateUp.length !== 2)
      throw new UnsupportedByKernels(`${at}: ${gateUp.length} products on the MLP input, expected gate and up`);
    const gate = gateUp.find((u) => isGate(g, u.out));
    const up = gateUp.find((u) => u !== gate);
    if (!gate || !up) throw new UnsupportedByKernels(`${at}: no SiLU gate (Sigmoid) in the MLP`);
    const mlp = residualAdd(g, attn.out, `${at}: MLP`);
    layers.push({
      attnNorm: attnNorm.weight,
      q: q.source,
      k: k.source,
      v: v.source,
      o: attn.unit.source,
      mlpNorm: mlpNorm.weight,
      gate: gate.source,
      up: up.source,
      down: mlp.unit.source,
    });
    residual = mlp.out;
  }
  const norm = rmsNorm(g, residual, 'the last layer');
  const head = g.unitsOn(norm.out);
  if (head.length !== 1)
    throw new UnsupportedByKernels(`${head.length} products after the final RMSNorm, expected the output projection`);
  return { embedding: embed.source, layers, norm: norm.weight, lmHead: head[0].source };
}

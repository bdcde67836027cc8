// Finds every weight's role in a hub-shaped Llama export by walking its nodes, never by initializer names:
// the walk docs/models.md ("The hub's ONNX exports") describes, written out so the test can check that
// description on every flavour the generator writes. Works on the generator's in-memory ModelDef.
import type { GraphDef, NodeDef, TensorData } from '../../scripts/model/onnx-proto-writer.js';

/** A weight as a graph stores it: the initializers one linear map reads, and the node that reads them. */
export interface LinearUnit {
  kind: 'MatMul' | 'MatMulNBits' | 'MatMulInteger';
  /** MatMul: [W]; MatMulNBits: [B, scales, zero_points?]; MatMulInteger: [W_q, W_zero_point, W_scale] */
  weights: TensorData[];
  node: NodeDef;
  /** the unit's float output */
  out: string;
}

export interface LayerRoles {
  attnNorm: TensorData;
  q: LinearUnit;
  k: LinearUnit;
  v: LinearUnit;
  o: LinearUnit;
  mlpNorm: TensorData;
  gate: LinearUnit;
  up: LinearUnit;
  down: LinearUnit;
}

export interface ModelRoles {
  /** the Gather's table, and the DequantizeLinear's scale / zero point when quantised */
  embedding: TensorData[];
  layers: LayerRoles[];
  norm: TensorData;
  lmHead: LinearUnit;
}

export function walkHubGraph(graph: GraphDef, numLayers: number): ModelRoles {
  const inits = new Map(graph.initializers.map((t) => [t.name, t]));
  const readers = new Map<string, NodeDef[]>();
  for (const n of graph.nodes) for (const i of n.inputs) readers.set(i, [...(readers.get(i) ?? []), n]);
  const readersOf = (v: string) => readers.get(v) ?? [];
  const only = <T>(items: T[], what: string): T => {
    if (items.length !== 1) throw new Error(`expected one ${what}, found ${items.length}`);
    return items[0];
  };
  const init = (name: string) => {
    const t = inits.get(name);
    if (!t) throw new Error(`${name} is not an initializer`);
    return t;
  };

  /** The linear maps reading x: MatMul with a constant B, MatMulNBits, or DynamicQuantizeLinear ->
   * MatMulInteger -> Cast -> Mul. */
  const linearsReading = (x: string): LinearUnit[] =>
    readersOf(x).flatMap((n): LinearUnit[] => {
      if (n.opType === 'MatMul' && n.inputs[0] === x && inits.has(n.inputs[1]))
        return [{ kind: 'MatMul', weights: [init(n.inputs[1])], node: n, out: n.outputs[0] }];
      if (n.opType === 'MatMulNBits')
        return [{ kind: 'MatMulNBits', weights: n.inputs.slice(1).map(init), node: n, out: n.outputs[0] }];
      if (n.opType !== 'DynamicQuantizeLinear') return [];
      return readersOf(n.outputs[0])
        .filter((m) => m.opType === 'MatMulInteger')
        .map((m) => {
          const cast = only(readersOf(m.outputs[0]), 'Cast after MatMulInteger');
          const scale = only(readersOf(cast.outputs[0]), 'Mul after the Cast');
          // The other input of that Mul is Mul(x_scale, W_scale).
          const scales = graph.nodes.find((s) => s.outputs[0] === scale.inputs[1])!;
          const weights = [init(m.inputs[1]), init(m.inputs[3]), init(scales.inputs[1])];
          return { kind: 'MatMulInteger' as const, weights, node: m, out: scale.outputs[0] };
        });
    });

  /** RMSNorm on the residual stream x: ([Cast] Pow ...) ends in Mul(weight, normed); returns its weight and output. */
  const rmsNormOn = (x: string): { weight: TensorData; out: string } => {
    let v = x;
    const cast = readersOf(v).find((n) => n.opType === 'Cast');
    if (cast) v = cast.outputs[0];
    const pow = only(
      readersOf(v).filter((n) => n.opType === 'Pow'),
      'Pow of the residual stream',
    );
    // Pow -> ReduceMean -> Add(eps) -> Sqrt -> Div | Reciprocal -> Mul(x, ·) [-> Cast] -> Mul(weight, ·)
    let node = pow;
    for (const op of ['ReduceMean', 'Add', 'Sqrt']) node = only(readersOf(node.outputs[0]), op);
    node = only(readersOf(node.outputs[0]), 'Div or Reciprocal');
    node = only(readersOf(node.outputs[0]), 'Mul by 1/rms');
    let out = node.outputs[0];
    const back = readersOf(out).find((n) => n.opType === 'Cast');
    if (back) out = back.outputs[0];
    const scale = only(readersOf(out), 'Mul by the norm weight');
    const weight = scale.inputs.find((i) => inits.has(i));
    if (!weight) throw new Error('the norm weight is not an initializer');
    return { weight: init(weight), out: scale.outputs[0] };
  };

  /** From a projection's output: Reshape -> Transpose; then, for k and v, the Concat with past_key_values.i.*. */
  const cacheOf = (unit: LinearUnit, layer: number): 'key' | 'value' | null => {
    const reshape = only(readersOf(unit.out), 'Reshape after a projection');
    const heads = only(readersOf(reshape.outputs[0]), 'Transpose to heads');
    const seen = new Set<string>();
    const queue = [heads.outputs[0]];
    // Breadth-first through RoPE (Slice, Neg, Concat, Mul, Add) up to the present Concat, if any.
    for (let steps = 0; queue.length && steps < 16; steps++) {
      const v = queue.shift()!;
      for (const n of readersOf(v)) {
        if (n.opType === 'Concat') {
          const src = n.inputs[0];
          const from = graph.nodes.find((c) => c.outputs[0] === src && c.opType === 'Cast')?.inputs[0] ?? src;
          const m = /^past_key_values\.(\d+)\.(key|value)$/.exec(from);
          if (m && Number(m[1]) === layer) return m[2] as 'key' | 'value';
        }
        if (n.opType !== 'MatMul' && !seen.has(n.outputs[0])) {
          seen.add(n.outputs[0]);
          queue.push(n.outputs[0]);
        }
      }
    }
    return null;
  };

  const gathers = graph.nodes.filter((n) => n.opType === 'Gather' && n.inputs[1] === 'input_ids');
  const gather = only(gathers, 'Gather of input_ids');
  const embedding = [init(gather.inputs[0])];
  let x = gather.outputs[0];
  const dq = readersOf(x).find((n) => n.opType === 'DequantizeLinear');
  if (dq) {
    embedding.push(init(dq.inputs[1]), init(dq.inputs[2]));
    x = dq.outputs[0];
  }

  const layers: LayerRoles[] = [];
  for (let i = 0; i < numLayers; i++) {
    const n1 = rmsNormOn(x);
    const qkv = linearsReading(n1.out);
    if (qkv.length !== 3) throw new Error(`layer ${i}: ${qkv.length} projections read the first norm`);
    const k = only(
      qkv.filter((u) => cacheOf(u, i) === 'key'),
      'projection reaching the key cache',
    );
    const v = only(
      qkv.filter((u) => cacheOf(u, i) === 'value'),
      'projection reaching the value cache',
    );
    const q = only(
      qkv.filter((u) => u !== k && u !== v),
      'query projection',
    );
    // The o projection: the linear map whose output the residual Add takes beside x.
    const residual = only(
      readersOf(x).filter((n) => n.opType === 'Add'),
      'residual Add',
    );
    const oOut = residual.inputs.find((input) => input !== x)!;
    const o = findUnitByOutput(graph, oOut, linearsReading);
    x = residual.outputs[0];
    const n2 = rmsNormOn(x);
    const gateUp = linearsReading(n2.out);
    const gate = only(
      gateUp.filter((u) => readersOf(u.out).some((n) => n.opType === 'Sigmoid')),
      'gate projection (read by Sigmoid)',
    );
    const up = only(
      gateUp.filter((u) => u !== gate),
      'up projection',
    );
    const product = only(readersOf(up.out), 'Mul of SiLU(gate) and up');
    const down = only(linearsReading(product.outputs[0]), 'down projection');
    const residual2 = only(
      readersOf(x).filter((n) => n.opType === 'Add' && n.inputs.includes(down.out)),
      'second residual Add',
    );
    x = residual2.outputs[0];
    layers.push({ attnNorm: n1.weight, q, k, v, o, mlpNorm: n2.weight, gate, up, down });
  }
  const final = rmsNormOn(x);
  const lmHead = only(linearsReading(final.out), 'lm_head');
  return { embedding, layers, norm: final.weight, lmHead };
}

/** The linear unit whose output is `out`: found from the units reading its input. */
function findUnitByOutput(graph: GraphDef, out: string, linearsReading: (x: string) => LinearUnit[]): LinearUnit {
  const producer = graph.nodes.find((n) => n.outputs.includes(out));
  if (!producer) throw new Error(`nothing produces ${out}`);
  // MatMul / MatMulNBits read the activation directly; the integer path ends in a Mul after MatMulInteger.
  let input = producer.inputs[0];
  if (producer.opType === 'Mul') {
    const cast = graph.nodes.find((n) => n.outputs[0] === producer.inputs[0])!;
    const mm = graph.nodes.find((n) => n.outputs[0] === cast.inputs[0])!;
    const dql = graph.nodes.find((n) => n.outputs.includes(mm.inputs[0]))!;
    input = dql.inputs[0];
  }
  const unit = linearsReading(input).find((u) => u.out === out);
  if (!unit) throw new Error(`${out} is not the output of a linear map`);
  return unit;
}

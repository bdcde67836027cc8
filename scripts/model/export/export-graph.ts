// A graph named the way torch.onnx.export (the TorchScript exporter optimum drives) names it, so the
// generator's hub-shaped exports carry the names a loader meets in the hub's onnx/ folders:
//   nodes         /model/layers.0/self_attn/q_proj/MatMul; a second Mul in one scope is /…/Mul_1
//   values        <node name>_output_0 (graph inputs and outputs keep their own names)
//   parameters    a module's weight under its own name when used as stored (model.embed_tokens.weight,
//                 model.layers.0.input_layernorm.weight)
//   folded        a constant the exporter computed from parameters, named after its first consumer:
//                 onnx::MatMul_<n> (a Linear's weight, transposed), onnx::Mul_<n>, onnx::Expand_<n>
//   constants     small tensors (axes, shapes, eps, scales) as Constant nodes, as the exporter writes them
// Initializers are written parameters first, then folded ones, the order torch leaves them in.
import type { AttrValue, GraphDef, NodeDef, TensorData, ValueInfo } from '../onnx-proto-writer.js';
import { DataType } from '../onnx-proto-writer.js';
import { halfBits } from '../../../src/engine/model/half.js';

export interface NodeOptions {
  attrs?: Record<string, AttrValue>;
  domain?: string;
  /** Exact node name (a quantiser's rename, e.g. …/MatMul_Q4); default `${scope}/${type}` made unique. */
  name?: string;
  /** Exact output names; missing ones are `${node}_output_${i}`. Their count is the node's output count. */
  outputs?: readonly (string | undefined)[];
}

export class ExportGraph {
  private readonly nodes: NodeDef[] = [];
  private readonly params: TensorData[] = [];
  private readonly folded: TensorData[] = [];
  private readonly inputs: ValueInfo[] = [];
  private readonly outputs: ValueInfo[] = [];
  private readonly used = new Set<string>();
  private nextId: number;

  /** `firstId`: the number of the first folded constant (torch numbers them by trace order). */
  constructor(firstId: number) {
    this.nextId = firstId;
  }

  private claim(name: string): string {
    if (this.used.has(name)) throw new Error(`duplicate value name ${name}`);
    this.used.add(name);
    return name;
  }

  private unique(base: string): string {
    let name = base;
    for (let i = 1; this.used.has(name); i++) name = `${base}_${i}`;
    return this.claim(name);
  }

  input(v: ValueInfo): string {
    this.inputs.push(v);
    return this.claim(v.name);
  }

  output(v: ValueInfo): void {
    this.outputs.push(v);
  }

  /** One node in `scope`; returns all its outputs. */
  node(type: string, inputs: readonly string[], scope: string, o: NodeOptions = {}): string[] {
    const name = o.name ? this.claim(o.name) : this.unique(`${scope}/${type}`);
    const outputs = (o.outputs ?? [undefined]).map((out, i) => this.claim(out ?? `${name}_output_${i}`));
    this.nodes.push({ opType: type, inputs, outputs, name, domain: o.domain, attrs: o.attrs });
    return outputs;
  }

  /** One node with one output; returns it. `out` names it exactly (a graph output). */
  op(type: string, inputs: readonly string[], scope: string, o: Omit<NodeOptions, 'outputs'> & { out?: string } = {}) {
    return this.node(type, inputs, scope, { ...o, outputs: [o.out] })[0];
  }

  /** A parameter under its module name. */
  param(t: TensorData): string {
    this.params.push(t);
    return this.claim(t.name);
  }

  /** A constant the exporter folded: `onnx::<consumer>_<n>`. */
  fold(consumer: string, t: Omit<TensorData, 'name'>): string {
    const name = this.claim(`onnx::${consumer}_${this.nextId++}`);
    this.folded.push({ ...t, name });
    return name;
  }

  /** The name the next folded constant gets, for a quantiser that stores its replacements under it. */
  foldedName(consumer: string): string {
    return `onnx::${consumer}_${this.nextId++}`;
  }

  /** An initializer added by a quantiser under a name derived from the weight it replaces. */
  derived(t: TensorData): string {
    this.folded.push(t);
    return this.claim(t.name);
  }

  /** A Constant node holding `t`. */
  constant(scope: string, t: Omit<TensorData, 'name'>): string {
    return this.op('Constant', [], scope, { attrs: { value: { kind: 'tensor', v: { ...t, name: '' } } } });
  }

  i64(scope: string, values: readonly (number | bigint)[], scalar = false): string {
    const data = BigInt64Array.from(values, (v) => BigInt(v));
    return this.constant(scope, { dataType: DataType.INT64, dims: scalar ? [] : [values.length], data });
  }

  /** A scalar of the activation type: float32, or float16 in a half-precision export. */
  scalar(scope: string, value: number, type: number): string {
    const data = type === DataType.FLOAT16 ? Uint16Array.of(halfBits(value)) : Float32Array.of(value);
    return this.constant(scope, { dataType: type, dims: [], data });
  }

  graph(name: string): GraphDef {
    return {
      name,
      nodes: this.nodes,
      initializers: [...this.params, ...this.folded],
      inputs: this.inputs,
      outputs: this.outputs,
    };
  }
}

// Small helper to emit ONNX nodes with unique, readable names and deduplicated constants.
import {
  DataType,
  type AttrValue,
  type GraphDef,
  type NodeDef,
  type TensorData,
  type ValueInfo,
} from './onnx-proto-writer.js';

export class GraphBuilder {
  readonly nodes: NodeDef[] = [];
  readonly initializers: TensorData[] = [];
  readonly inputs: ValueInfo[] = [];
  readonly outputs: ValueInfo[] = [];
  private used = new Set<string>();
  private consts = new Map<string, string>();

  /** A fresh value name based on `base` (names double as debugging aids in ORT errors). */
  fresh(base: string): string {
    let name = base;
    for (let i = 1; this.used.has(name); i++) name = `${base}_${i}`;
    this.used.add(name);
    return name;
  }

  /** Emits one node; returns its first output. `out` names an output exactly (graph outputs). */
  op(
    opType: string,
    inputs: readonly string[],
    opts: { name: string; attrs?: Record<string, AttrValue>; out?: string; domain?: string },
  ): string {
    const output = opts.out ?? this.fresh(opts.name);
    if (opts.out) this.used.add(opts.out);
    this.nodes.push({
      opType,
      inputs,
      outputs: [output],
      name: this.fresh(`${opts.name}/${opType}`),
      domain: opts.domain,
      attrs: opts.attrs,
    });
    return output;
  }

  initializer(t: TensorData): string {
    if (this.used.has(t.name)) throw new Error(`duplicate initializer ${t.name}`);
    this.used.add(t.name);
    this.initializers.push(t);
    return t.name;
  }

  /** int64 constant (deduplicated by value). */
  i64(values: readonly number[], scalar = false): string {
    const key = `i64:${scalar}:${values.join(',')}`;
    const hit = this.consts.get(key);
    if (hit) return hit;
    const name = this.fresh(`const_i64_${scalar ? 's' : ''}${values.join('_').replace(/-/g, 'm')}`);
    this.used.delete(name);
    this.initializer({
      name,
      dataType: DataType.INT64,
      dims: scalar ? [] : [values.length],
      data: BigInt64Array.from(values, (v) => BigInt(v)),
    });
    this.consts.set(key, name);
    return name;
  }

  /** float32 scalar constant (deduplicated by value). */
  f32(value: number, label: string): string {
    const key = `f32:${Math.fround(value)}`;
    const hit = this.consts.get(key);
    if (hit) return hit;
    const name = this.fresh(`const_${label}`);
    this.used.delete(name);
    this.initializer({ name, dataType: DataType.FLOAT, dims: [], data: Float32Array.of(value) });
    this.consts.set(key, name);
    return name;
  }

  input(v: ValueInfo): string {
    this.used.add(v.name);
    this.inputs.push(v);
    return v.name;
  }

  output(v: ValueInfo): void {
    this.outputs.push(v);
  }

  graph(name: string): GraphDef {
    return { name, nodes: this.nodes, initializers: this.initializers, inputs: this.inputs, outputs: this.outputs };
  }
}

export const ints = (v: readonly number[]): AttrValue => ({ kind: 'ints', v });
export const int = (v: number): AttrValue => ({ kind: 'int', v });
export const float = (v: number): AttrValue => ({ kind: 'float', v });

// Minimal protobuf encoder for the subset of onnx.proto this project writes.
// Messages are encoded into lists of chunks (never one big concatenation) so a
// 540 MB fp32 model is written straight from the weight typed arrays without copies.
import { closeSync, openSync, writeSync } from 'node:fs';

/** Encoded protobuf bytes as a list of chunks plus their total length. */
export interface Encoded {
  chunks: Uint8Array[];
  length: number;
}

// ONNX TensorProto.DataType values used here.
export const DataType = {
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  INT32: 6,
  INT64: 7,
  BOOL: 9,
  FLOAT16: 10,
} as const;

// AttributeProto.AttributeType values used here.
const AttrType = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, FLOATS: 6, INTS: 7 } as const;

const WIRE_VARINT = 0;
const WIRE_I32 = 5;
const WIRE_LEN = 2;
const utf8 = new TextEncoder();

class Builder {
  private chunks: Uint8Array[] = [];
  private length = 0;
  private small: number[] = [];

  private flushSmall(): void {
    if (this.small.length > 0) {
      const b = Uint8Array.from(this.small);
      this.chunks.push(b);
      this.length += b.length;
      this.small = [];
    }
  }

  private varint(v: bigint | number): void {
    let x = BigInt.asUintN(64, BigInt(v));
    while (x >= 0x80n) {
      this.small.push(Number(x & 0x7fn) | 0x80);
      x >>= 7n;
    }
    this.small.push(Number(x));
  }

  private tag(field: number, wire: number): void {
    this.varint((field << 3) | wire);
  }

  int(field: number, v: number | bigint): this {
    this.tag(field, WIRE_VARINT);
    this.varint(v);
    return this;
  }

  float(field: number, v: number): this {
    this.tag(field, WIRE_I32);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, v, true);
    this.small.push(...b);
    return this;
  }

  /** Packed repeated varint (proto3 default for repeated scalars). */
  packedInts(field: number, vs: readonly (number | bigint)[]): this {
    const inner = new Builder();
    for (const v of vs) inner.varint(v);
    return this.message(field, inner.finish());
  }

  packedFloats(field: number, vs: readonly number[]): this {
    const b = new Uint8Array(vs.length * 4);
    const dv = new DataView(b.buffer);
    for (const [i, v] of vs.entries()) dv.setFloat32(i * 4, v, true);
    return this.bytes(field, b);
  }

  string(field: number, s: string): this {
    return this.bytes(field, utf8.encode(s));
  }

  bytes(field: number, b: Uint8Array): this {
    this.tag(field, WIRE_LEN);
    this.varint(b.length);
    this.flushSmall();
    this.chunks.push(b);
    this.length += b.length;
    return this;
  }

  message(field: number, m: Encoded): this {
    this.tag(field, WIRE_LEN);
    this.varint(m.length);
    this.flushSmall();
    this.chunks.push(...m.chunks);
    this.length += m.length;
    return this;
  }

  finish(): Encoded {
    this.flushSmall();
    return { chunks: this.chunks, length: this.length };
  }
}

/** A tensor ready for TensorProto.raw_data (little-endian; this runs on LE hosts only). */
export interface TensorData {
  name: string;
  dataType: number;
  dims: readonly number[];
  data: ArrayBufferView;
}

export type AttrValue =
  | { kind: 'int'; v: number }
  | { kind: 'float'; v: number }
  | { kind: 'string'; v: string }
  | { kind: 'ints'; v: readonly number[] }
  | { kind: 'floats'; v: readonly number[] }
  | { kind: 'tensor'; v: TensorData };

export interface NodeDef {
  opType: string;
  inputs: readonly string[];
  outputs: readonly string[];
  name: string;
  domain?: string;
  attrs?: Record<string, AttrValue>;
}

/** A dimension is a fixed size or a symbolic dim_param name. */
export type Dim = number | string;

export interface ValueInfo {
  name: string;
  elemType: number;
  shape: readonly Dim[];
}

export interface GraphDef {
  name: string;
  nodes: readonly NodeDef[];
  initializers: readonly TensorData[];
  inputs: readonly ValueInfo[];
  outputs: readonly ValueInfo[];
}

export interface ModelDef {
  irVersion: number;
  opsets: readonly { domain: string; version: number }[];
  producerName: string;
  producerVersion: string;
  graph: GraphDef;
}

if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error('onnx-proto-writer assumes a little-endian host (raw_data is little-endian)');
}

export function encodeTensor(t: TensorData): Encoded {
  const b = new Builder();
  b.packedInts(1, t.dims);
  b.int(2, t.dataType);
  b.string(8, t.name);
  b.bytes(9, new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  return b.finish();
}

function encodeAttribute(name: string, a: AttrValue): Encoded {
  const b = new Builder();
  b.string(1, name);
  switch (a.kind) {
    case 'float':
      b.float(2, a.v).int(20, AttrType.FLOAT);
      break;
    case 'int':
      b.int(3, a.v).int(20, AttrType.INT);
      break;
    case 'string':
      b.bytes(4, utf8.encode(a.v)).int(20, AttrType.STRING);
      break;
    case 'tensor':
      b.message(5, encodeTensor(a.v)).int(20, AttrType.TENSOR);
      break;
    case 'floats':
      b.packedFloats(7, a.v).int(20, AttrType.FLOATS);
      break;
    case 'ints':
      b.packedInts(8, a.v).int(20, AttrType.INTS);
      break;
  }
  return b.finish();
}

function encodeNode(n: NodeDef): Encoded {
  const b = new Builder();
  for (const i of n.inputs) b.string(1, i);
  for (const o of n.outputs) b.string(2, o);
  b.string(3, n.name);
  b.string(4, n.opType);
  // Attributes sorted by name so output never depends on object insertion order.
  for (const key of Object.keys(n.attrs ?? {}).sort()) b.message(5, encodeAttribute(key, n.attrs![key]));
  if (n.domain) b.string(7, n.domain);
  return b.finish();
}

function encodeValueInfo(v: ValueInfo): Encoded {
  const shape = new Builder();
  for (const d of v.shape) {
    const dim = new Builder();
    if (typeof d === 'number') dim.int(1, d);
    else dim.string(2, d);
    shape.message(1, dim.finish());
  }
  const tensorType = new Builder().int(1, v.elemType).message(2, shape.finish()).finish();
  const typeProto = new Builder().message(1, tensorType).finish();
  return new Builder().string(1, v.name).message(2, typeProto).finish();
}

function encodeGraph(g: GraphDef): Encoded {
  const b = new Builder();
  for (const n of g.nodes) b.message(1, encodeNode(n));
  b.string(2, g.name);
  for (const t of g.initializers) b.message(5, encodeTensor(t));
  for (const i of g.inputs) b.message(11, encodeValueInfo(i));
  for (const o of g.outputs) b.message(12, encodeValueInfo(o));
  return b.finish();
}

export function encodeModel(m: ModelDef): Encoded {
  const b = new Builder();
  b.int(1, m.irVersion);
  b.string(2, m.producerName);
  b.string(3, m.producerVersion);
  b.message(7, encodeGraph(m.graph));
  for (const o of m.opsets) {
    const op = new Builder();
    if (o.domain) op.string(1, o.domain);
    op.int(2, o.version);
    b.message(8, op.finish());
  }
  return b.finish();
}

/** Concatenates the chunks (fine for small models and tests). */
export function toBytes(e: Encoded): Uint8Array {
  const out = new Uint8Array(e.length);
  let off = 0;
  for (const c of e.chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** Streams the chunks to a file without building one big buffer. */
export function writeEncoded(path: string, e: Encoded): void {
  const fd = openSync(path, 'w');
  try {
    for (const c of e.chunks) {
      let off = 0;
      while (off < c.length) off += writeSync(fd, c, off, c.length - off);
    }
  } finally {
    closeSync(fd);
  }
}

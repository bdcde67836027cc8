/**
 * An ONNX graph node as the kernel loader reads it: op, inputs, outputs and the scalar attributes the
 * weight formats need (MatMulNBits' K, N, bits, block_size; Gemm's transB; Gather's axis). Decoded from
 * NodeProto (input = 1, output = 2, name = 3, op_type = 4, attribute = 5, domain = 7) and AttributeProto
 * (name = 1, f = 2, i = 3, s = 4, floats = 7, ints = 8); tensors and graphs in attributes are skipped.
 */
export interface OnnxNode {
  op: string;
  domain: string;
  name: string;
  inputs: string[];
  outputs: string[];
  attrs: Map<string, number | number[] | string>;
}

/** Minimal protobuf reader over bytes already in hand (a node is small: it is read whole). */
class Fields {
  pos: number;
  constructor(
    private readonly bytes: Uint8Array,
    start: number,
    private readonly end: number,
  ) {
    this.pos = start;
  }
  get done(): boolean {
    return this.pos >= this.end;
  }
  varint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      const b = this.bytes[this.pos++];
      value += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return value;
      scale *= 128;
    }
    throw new Error('ONNX node: varint longer than 10 bytes');
  }
  /** A signed int64 (two's complement in a varint): exact in a double for the small values attributes hold. */
  signed(): number {
    const v = this.varint();
    return v >= 2 ** 63 ? v - 2 ** 64 : v;
  }
  span(): [number, number] {
    const n = this.varint();
    const s = this.pos;
    this.pos += n;
    if (this.pos > this.end) throw new Error('ONNX node: field runs past its message');
    return [s, this.pos];
  }
  text(): string {
    return new TextDecoder().decode(this.bytes.subarray(...this.span()));
  }
  skip(wire: number): void {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.span();
    else if (wire === 5) this.pos += 4;
    else throw new Error(`ONNX node: unsupported wire type ${wire}`);
  }
}

function readAttribute(bytes: Uint8Array, start: number, end: number): [string, number | number[] | string] | null {
  const f = new Fields(bytes, start, end);
  let name = '';
  let value: number | number[] | string | null = null;
  const ints: number[] = [];
  while (!f.done) {
    const tag = f.varint();
    const [field, wire] = [Math.floor(tag / 8), tag & 7];
    if (field === 1 && wire === 2) name = f.text();
    else if (field === 2 && wire === 5) {
      value = new DataView(bytes.buffer, bytes.byteOffset + f.pos, 4).getFloat32(0, true);
      f.pos += 4;
    } else if (field === 3 && wire === 0) value = f.signed();
    else if (field === 4 && wire === 2) value = f.text();
    else if (field === 8 && wire === 0) ints.push(f.signed());
    else if (field === 8 && wire === 2) {
      const [s, e] = f.span();
      const packed = new Fields(bytes, s, e);
      while (!packed.done) ints.push(packed.signed());
    } else f.skip(wire);
  }
  if (value === null && ints.length) value = ints;
  return name && value !== null ? [name, value] : null;
}

/** Decodes one NodeProto held whole in `bytes`. */
export function readNode(bytes: Uint8Array): OnnxNode {
  const f = new Fields(bytes, 0, bytes.length);
  const node: OnnxNode = { op: '', domain: '', name: '', inputs: [], outputs: [], attrs: new Map() };
  while (!f.done) {
    const tag = f.varint();
    const [field, wire] = [Math.floor(tag / 8), tag & 7];
    if (wire !== 2) {
      f.skip(wire);
      continue;
    }
    if (field === 1) node.inputs.push(f.text());
    else if (field === 2) node.outputs.push(f.text());
    else if (field === 3) node.name = f.text();
    else if (field === 4) node.op = f.text();
    else if (field === 7) node.domain = f.text();
    else if (field === 5) {
      const attr = readAttribute(bytes, ...f.span());
      if (attr) node.attrs.set(attr[0], attr[1]);
    } else f.skip(wire);
  }
  return node;
}

/**
 * Where each initializer of an ONNX model lies in the file: name, element type, dims and the byte range
 * of its raw_data. Nothing is copied; the kernel runner copies each tensor once into linear memory.
 * Only the fields needed are decoded (ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto
 * dims = 1, data_type = 2, name = 8, raw_data = 9); everything else is skipped by wire type.
 */
export interface InitializerRef {
  name: string;
  /** ONNX TensorProto.DataType: 1 float, 2 uint8, 10 float16, ... */
  dataType: number;
  dims: number[];
  /** raw_data's byte range in the file; empty when the tensor keeps its values in typed fields. */
  start: number;
  end: number;
  /** Where raw_data already lies in linear memory, when the file was streamed there (onnx-stream.ts). */
  ptr?: number;
}

export const ONNX_FLOAT = 1;
export const ONNX_UINT8 = 2;
export const ONNX_FLOAT16 = 10;

class Cursor {
  constructor(
    readonly bytes: Uint8Array,
    public pos: number,
    readonly end: number,
  ) {}

  get done(): boolean {
    return this.pos >= this.end;
  }

  varint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new Error('ONNX file: truncated varint');
      const b = this.bytes[this.pos++];
      value += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return value;
      scale *= 128;
    }
    throw new Error('ONNX file: varint longer than 10 bytes');
  }

  /** Returns [start, end) of a length-delimited field and moves past it. */
  span(): [number, number] {
    const length = this.varint();
    const start = this.pos;
    if (start + length > this.end) throw new Error('ONNX file: field runs past its message');
    this.pos = start + length;
    return [start, this.pos];
  }

  skip(wire: number): void {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.span();
    else if (wire === 5) this.pos += 4;
    else throw new Error(`ONNX file: unsupported protobuf wire type ${wire}`);
  }
}

function readTensor(bytes: Uint8Array, start: number, end: number): InitializerRef {
  const c = new Cursor(bytes, start, end);
  const t: InitializerRef = { name: '', dataType: 0, dims: [], start: 0, end: 0 };
  while (!c.done) {
    const tag = c.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1 && wire === 0) t.dims.push(c.varint());
    else if (field === 1 && wire === 2) {
      const [s, e] = c.span();
      const packed = new Cursor(bytes, s, e);
      while (!packed.done) t.dims.push(packed.varint());
    } else if (field === 2 && wire === 0) t.dataType = c.varint();
    else if (field === 8 && wire === 2) t.name = new TextDecoder().decode(bytes.subarray(...c.span()));
    else if (field === 9 && wire === 2) [t.start, t.end] = c.span();
    else c.skip(wire);
  }
  return t;
}

/** Every graph initializer of `model`, by name. */
export function indexInitializers(model: Uint8Array): Map<string, InitializerRef> {
  const out = new Map<string, InitializerRef>();
  const m = new Cursor(model, 0, model.length);
  while (!m.done) {
    const tag = m.varint();
    if (tag !== ((7 << 3) | 2)) {
      m.skip(tag & 7);
      continue;
    }
    const [gs, ge] = m.span();
    const g = new Cursor(model, gs, ge);
    while (!g.done) {
      const t = g.varint();
      if (t === ((5 << 3) | 2)) {
        const tensor = readTensor(model, ...g.span());
        out.set(tensor.name, tensor);
      } else g.skip(t & 7);
    }
  }
  return out;
}

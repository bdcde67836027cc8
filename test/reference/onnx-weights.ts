// Minimal protobuf reader for ONNX ModelProto: pulls graph initializers out of model.onnx.
// Written apart from the graph builder on purpose (it is the test oracle's only input path).
// Only the fields we need are decoded; every other field of every wire type is skipped.
//
// ModelProto.graph = 7 (message); GraphProto.initializer = 5 (repeated TensorProto);
// TensorProto: dims = 1 (int64, packed or not), data_type = 2, float_data = 4 (float, packed or not),
//              name = 8 (string), raw_data = 9 (bytes).

export interface Tensor {
  dims: number[];
  data: Float32Array;
}

/** Non-float32 initializer: kept with its raw bytes so callers can see it existed. */
export interface OtherTensor {
  dims: number[];
  dataType: number;
  rawData: Uint8Array;
}

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_SGROUP = 3;
const WIRE_EGROUP = 4;
const WIRE_I32 = 5;

const TENSOR_FLOAT = 1;

/** Cursor over a protobuf byte range [pos, end). */
export class PbReader {
  pos: number;
  constructor(
    readonly buf: Uint8Array,
    start = 0,
    readonly end = buf.length,
  ) {
    this.pos = start;
  }

  done(): boolean {
    return this.pos >= this.end;
  }

  /** Varint as bigint: exact for the full 64-bit range (a number would lose bits past 2^53). */
  varintBig(): bigint {
    let result = 0n;
    let shift = 0n;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new Error('protobuf: truncated varint');
      const b = this.buf[this.pos++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result & 0xffffffffffffffffn;
      shift += 7n;
    }
    throw new Error('protobuf: varint longer than 10 bytes');
  }

  /** Varint as a JS number; int64 is read as two's complement so negative dims come back negative. */
  varint(): number {
    const v = BigInt.asIntN(64, this.varintBig());
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new Error(`protobuf: varint ${v} not a safe integer`);
    }
    return Number(v);
  }

  /** Length-delimited payload as [start, end) offsets into buf (no copy). */
  lenDelimited(): [number, number] {
    const len = this.varint();
    const start = this.pos;
    const end = start + len;
    if (len < 0 || end > this.end) throw new Error('protobuf: length past end of message');
    this.pos = end;
    return [start, end];
  }

  tag(): { field: number; wire: number } {
    const t = this.varint();
    return { field: Math.floor(t / 8), wire: t & 7 };
  }

  skip(wire: number, field: number): void {
    switch (wire) {
      case WIRE_VARINT:
        this.varintBig();
        return;
      case WIRE_I64:
        this.advance(8);
        return;
      case WIRE_LEN:
        this.lenDelimited();
        return;
      case WIRE_I32:
        this.advance(4);
        return;
      case WIRE_SGROUP:
        // Deprecated groups: skip nested fields until the matching end-group tag.
        for (;;) {
          const t = this.tag();
          if (t.wire === WIRE_EGROUP) {
            if (t.field !== field) throw new Error('protobuf: mismatched end-group');
            return;
          }
          this.skip(t.wire, t.field);
        }
      default:
        throw new Error(`protobuf: bad wire type ${wire}`);
    }
  }

  private advance(n: number): void {
    if (this.pos + n > this.end) throw new Error('protobuf: truncated fixed field');
    this.pos += n;
  }
}

interface RawTensor {
  name: string;
  dims: number[];
  dataType: number;
  floatData: number[];
  raw: Uint8Array | null;
}

function readTensor(buf: Uint8Array, start: number, end: number): RawTensor {
  const r = new PbReader(buf, start, end);
  const t: RawTensor = { name: '', dims: [], dataType: 0, floatData: [], raw: null };
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  while (!r.done()) {
    const { field, wire } = r.tag();
    if (field === 1 && wire === WIRE_VARINT) {
      t.dims.push(r.varint());
    } else if (field === 1 && wire === WIRE_LEN) {
      const [s, e] = r.lenDelimited(); // packed int64
      const p = new PbReader(buf, s, e);
      while (!p.done()) t.dims.push(p.varint());
    } else if (field === 2 && wire === WIRE_VARINT) {
      t.dataType = r.varint();
    } else if (field === 4 && wire === WIRE_I32) {
      t.floatData.push(view.getFloat32(r.pos, true));
      r.pos += 4;
    } else if (field === 4 && wire === WIRE_LEN) {
      const [s, e] = r.lenDelimited(); // packed float
      if ((e - s) % 4 !== 0) throw new Error('protobuf: packed float_data not a multiple of 4');
      for (let o = s; o < e; o += 4) t.floatData.push(view.getFloat32(o, true));
    } else if (field === 8 && wire === WIRE_LEN) {
      const [s, e] = r.lenDelimited();
      t.name = new TextDecoder().decode(buf.subarray(s, e));
    } else if (field === 9 && wire === WIRE_LEN) {
      const [s, e] = r.lenDelimited();
      t.raw = buf.subarray(s, e);
    } else {
      r.skip(wire, field);
    }
  }
  return t;
}

function floatsOf(t: RawTensor): Float32Array {
  const count = t.dims.reduce((a, b) => a * b, 1);
  let data: Float32Array;
  if (t.raw !== null) {
    if (t.raw.length % 4 !== 0) throw new Error(`${t.name}: raw_data not a multiple of 4 bytes`);
    const v = new DataView(t.raw.buffer, t.raw.byteOffset, t.raw.byteLength);
    data = new Float32Array(t.raw.length / 4);
    // Explicit little-endian reads: independent of host endianness and of buffer alignment.
    for (let i = 0; i < data.length; i++) data[i] = v.getFloat32(i * 4, true);
  } else {
    data = Float32Array.from(t.floatData);
  }
  if (data.length !== count) {
    throw new Error(`${t.name}: ${data.length} floats but dims [${t.dims}] need ${count}`);
  }
  return data;
}

/** Calls fn(start, end) for every GraphProto.initializer inside ModelProto.graph. */
function forEachInitializer(model: Uint8Array, fn: (start: number, end: number) => void): void {
  const m = new PbReader(model);
  while (!m.done()) {
    const { field, wire } = m.tag();
    if (field !== 7 || wire !== WIRE_LEN) {
      m.skip(wire, field);
      continue;
    }
    const [gs, ge] = m.lenDelimited();
    const g = new PbReader(model, gs, ge);
    while (!g.done()) {
      const t = g.tag();
      if (t.field === 5 && t.wire === WIRE_LEN) fn(...g.lenDelimited());
      else g.skip(t.wire, t.field);
    }
  }
}

/** float32 initializers of an ONNX model, by name. Other data types are skipped. */
export function readOnnxWeights(model: Uint8Array): Map<string, Tensor> {
  const out = new Map<string, Tensor>();
  forEachInitializer(model, (s, e) => {
    const t = readTensor(model, s, e);
    if (t.dataType === TENSOR_FLOAT) out.set(t.name, { dims: t.dims, data: floatsOf(t) });
  });
  return out;
}

/** Initializers that are not float32 (raw bytes only; for diagnostics). */
export function readOtherInitializers(model: Uint8Array): Map<string, OtherTensor> {
  const out = new Map<string, OtherTensor>();
  forEachInitializer(model, (s, e) => {
    const t = readTensor(model, s, e);
    if (t.dataType !== TENSOR_FLOAT) {
      out.set(t.name, { dims: t.dims, dataType: t.dataType, rawData: t.raw ?? new Uint8Array(0) });
    }
  });
  return out;
}

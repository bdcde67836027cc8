// Writes GGUF files (version 3, little-endian): metadata, the tensor table, aligned tensor data. Tensors are
// encoded one at a time, so peak memory is about one tensor.
import { closeSync, openSync, writeSync } from 'node:fs';
import { GGML_TYPE, ggmlTensorBytes } from '../../src/engine/formats/gguf/ggml-types.js';
import { quantize, type QuantType } from './ggml-quants.js';

export const ALIGNMENT = 32;

/** GGUF metadata value types (gguf.h). */
const V = { UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7, STRING: 8, ARRAY: 9 } as const;

export type MetaValue =
  | { type: 'u32' | 'i32' | 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'str'; value: string }
  | { type: 'str[]'; value: readonly string[] }
  | { type: 'i32[]' | 'f32[]'; value: readonly number[] };

export interface GgufTensor {
  name: string;
  /** ggml dims, fastest-varying first: [in, out] for a matrix. */
  ne: number[];
  type: QuantType;
  /** Row-major values of the (ne[1], ne[0]) matrix, or the vector. */
  data: () => Float32Array;
}

class ByteSink {
  private chunks: Uint8Array[] = [];
  length = 0;
  private push(bytes: Uint8Array): void {
    this.chunks.push(bytes);
    this.length += bytes.length;
  }
  private number(size: number, set: (v: DataView) => void): void {
    const b = new Uint8Array(size);
    set(new DataView(b.buffer));
    this.push(b);
  }
  u32(v: number): void {
    this.number(4, (d) => d.setUint32(0, v, true));
  }
  i32(v: number): void {
    this.number(4, (d) => d.setInt32(0, v, true));
  }
  u64(v: number): void {
    this.number(8, (d) => d.setBigUint64(0, BigInt(v), true));
  }
  f32(v: number): void {
    this.number(4, (d) => d.setFloat32(0, v, true));
  }
  u8(v: number): void {
    this.push(Uint8Array.of(v));
  }
  str(s: string): void {
    const bytes = new TextEncoder().encode(s);
    this.u64(bytes.length);
    this.push(bytes);
  }
  pad(alignment: number): void {
    const n = (alignment - (this.length % alignment)) % alignment;
    if (n) this.push(new Uint8Array(n));
  }
  bytes(): Uint8Array {
    const out = new Uint8Array(this.length);
    let o = 0;
    for (const c of this.chunks) {
      out.set(c, o);
      o += c.length;
    }
    return out;
  }
}

function writeMeta(sink: ByteSink, key: string, m: MetaValue): void {
  sink.str(key);
  switch (m.type) {
    case 'u32':
      sink.u32(V.UINT32);
      sink.u32(m.value);
      break;
    case 'i32':
      sink.u32(V.INT32);
      sink.i32(m.value);
      break;
    case 'f32':
      sink.u32(V.FLOAT32);
      sink.f32(m.value);
      break;
    case 'bool':
      sink.u32(V.BOOL);
      sink.u8(m.value ? 1 : 0);
      break;
    case 'str':
      sink.u32(V.STRING);
      sink.str(m.value);
      break;
    case 'str[]':
      sink.u32(V.ARRAY);
      sink.u32(V.STRING);
      sink.u64(m.value.length);
      for (const s of m.value) sink.str(s);
      break;
    case 'i32[]':
    case 'f32[]':
      sink.u32(V.ARRAY);
      sink.u32(m.type === 'i32[]' ? V.INT32 : V.FLOAT32);
      sink.u64(m.value.length);
      for (const v of m.value) (m.type === 'i32[]' ? sink.i32 : sink.f32).call(sink, v);
      break;
  }
}

export function tensorBytes(t: Pick<GgufTensor, 'ne' | 'type'>): number {
  return ggmlTensorBytes(GGML_TYPE[t.type], t.ne);
}

function encodeTensor(t: GgufTensor): Uint8Array {
  const data = t.data();
  if (data.length !== t.ne.reduce((a, b) => a * b, 1))
    throw new Error(`${t.name}: ${data.length} values for dims ${t.ne}`);
  return quantize(t.type, data, t.ne[0]);
}

/** Writes a GGUF v3 file. */
export function writeGguf(path: string, meta: [string, MetaValue][], tensors: GgufTensor[]): void {
  const head = new ByteSink();
  head.u32(0x46554747); // "GGUF"
  head.u32(3);
  head.u64(tensors.length);
  head.u64(meta.length);
  for (const [key, value] of meta) writeMeta(head, key, value);
  let offset = 0;
  for (const t of tensors) {
    const size = tensorBytes(t); // throws when the rows are not whole blocks of the type
    head.str(t.name);
    head.u32(t.ne.length);
    for (const n of t.ne) head.u64(n);
    head.u32(GGML_TYPE[t.type]);
    head.u64(offset);
    offset += Math.ceil(size / ALIGNMENT) * ALIGNMENT;
  }
  head.pad(ALIGNMENT);
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, head.bytes());
    for (const t of tensors) {
      const bytes = encodeTensor(t);
      writeSync(fd, bytes);
      const pad = (ALIGNMENT - (bytes.length % ALIGNMENT)) % ALIGNMENT;
      if (pad) writeSync(fd, new Uint8Array(pad));
    }
  } finally {
    closeSync(fd);
  }
}

// The header of a GGUF file (llama.cpp's format, versions 2 and 3; ggml's gguf.cpp is the reference), read
// from a ByteReader so it works on a stream. Layout, all little-endian:
//   "GGUF" u32 version  u64 n_tensors  u64 n_kv
//   n_kv × (string key, u32 value type, value)      string = u64 length + UTF-8 bytes
//   n_tensors × (string name, u32 n_dims, u64 ne[n_dims] (fastest first), u32 ggml type, u64 offset)
//   padding to general.alignment (default 32), then the tensor data; offsets count from there.
// The parser leaves the reader at the end of the tensor table; the loader skips to `dataStart` and reads
// the tensors in offset order.
import { byteReader, type ByteReader } from './byte-reader.js';
import { ggmlLayout, ggmlTensorBytes, ggmlTypeName, isKnownGgmlType } from './ggml-types.js';
import {
  GGUF_VALUE_TYPE,
  GgufMetadata,
  type GgufArrayItems,
  type GgufValue,
  type GgufValueType,
} from './gguf-metadata.js';

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** ggml's GGML_MAX_DIMS. */
const MAX_DIMS = 4;
/** Bounds that keep a corrupt count from allocating without end; far above any real file. */
const MAX_ENTRIES = 1 << 24;
const MAX_STRING_BYTES = 1 << 28;

export interface GgufTensorInfo {
  name: string;
  /** ggml dims, fastest-varying first: a matrix of `rows` rows of `cols` values is [cols, rows]. */
  ne: number[];
  /** ggml type id (ggml-types.ts); may be one we cannot decode: the loader refuses it by name. */
  type: number;
  /** Byte offset from `dataStart`. */
  offset: number;
  /** Bytes the tensor's data takes, or null for a type whose layout we do not know. */
  byteSize: number | null;
}

export interface GgufHeader {
  version: 2 | 3;
  metadata: GgufMetadata;
  /** In the order the file lists them (offset order is `tensorsByOffset`). */
  tensors: GgufTensorInfo[];
  alignment: number;
  /** Absolute byte offset of the tensor data. */
  dataStart: number;
}

const TYPE_NAMES = new Map<number, GgufValueType>(
  Object.entries(GGUF_VALUE_TYPE).map(([name, id]) => [id, name as GgufValueType]),
);
const FIXED_SIZE: Partial<Record<GgufValueType, number>> = {
  u8: 1,
  i8: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  bool: 1,
  u64: 8,
  i64: 8,
  f64: 8,
};
const LITTLE_ENDIAN_HOST = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;
// ignoreBOM: a string is its bytes; Gemma 3's vocabulary holds "\uFEFF//" beside "//".
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function valueType(id: number): GgufValueType {
  const t = TYPE_NAMES.get(id);
  if (!t) throw new Error(`unknown GGUF value type ${id}`);
  return t;
}

function count(n: bigint, what: string): number {
  if (n > BigInt(MAX_ENTRIES)) throw new Error(`${what} ${n} is past any real file's (corrupt header?)`);
  return Number(n);
}

function decodeString(bytes: Uint8Array): string {
  // Most token texts are short ASCII: building them directly skips TextDecoder's per-call cost.
  if (bytes.length <= 32) {
    let s = '';
    for (let i = 0; i < bytes.length; i++) {
      if (bytes[i] >= 0x80) return utf8.decode(bytes);
      s += String.fromCharCode(bytes[i]);
    }
    return s;
  }
  return utf8.decode(bytes);
}

async function readString(r: ByteReader): Promise<string> {
  const head = r.peek(8);
  if (head) {
    const len = new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true);
    if (len <= BigInt(MAX_STRING_BYTES)) {
      const whole = r.peek(8 + Number(len));
      if (whole) {
        r.advance(whole.length);
        return decodeString(whole.subarray(8));
      }
    }
  }
  const len = await r.u64();
  if (len > BigInt(MAX_STRING_BYTES)) throw new Error(`a string of ${len} bytes (corrupt header?)`);
  return decodeString(await r.bytes(Number(len)));
}

/** n fixed-size numbers in one read, as the typed array of their type. */
async function readNumbers(r: ByteReader, type: GgufValueType, n: number): Promise<GgufArrayItems> {
  const size = FIXED_SIZE[type]!;
  const raw = await r.bytes(n * size);
  if (type === 'bool') return Array.from(raw, (b) => b !== 0);
  const Ctor = {
    u8: Uint8Array,
    i8: Int8Array,
    u16: Uint16Array,
    i16: Int16Array,
    u32: Uint32Array,
    i32: Int32Array,
    f32: Float32Array,
    u64: BigUint64Array,
    i64: BigInt64Array,
    f64: Float64Array,
  }[type as Exclude<GgufValueType, 'bool' | 'string' | 'array'>];
  const out = new Ctor(n);
  if (LITTLE_ENDIAN_HOST) new Uint8Array(out.buffer).set(raw);
  else {
    const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const get = (i: number): number | bigint => {
      const o = i * size;
      if (type === 'u64') return dv.getBigUint64(o, true);
      if (type === 'i64') return dv.getBigInt64(o, true);
      if (type === 'f64') return dv.getFloat64(o, true);
      if (type === 'f32') return dv.getFloat32(o, true);
      if (type === 'u32') return dv.getUint32(o, true);
      if (type === 'i32') return dv.getInt32(o, true);
      if (type === 'u16') return dv.getUint16(o, true);
      if (type === 'i16') return dv.getInt16(o, true);
      return type === 'i8' ? dv.getInt8(o) : dv.getUint8(o);
    };
    for (let i = 0; i < n; i++) (out as { [i: number]: number | bigint })[i] = get(i);
  }
  return out;
}

async function readArray(r: ByteReader): Promise<{ itemType: GgufValueType; value: GgufArrayItems }> {
  const itemType = valueType(await r.u32());
  const n = count(await r.u64(), 'an array of');
  if (itemType === 'string') {
    const out = new Array<string>(n);
    for (let i = 0; i < n; i++) out[i] = await readString(r);
    return { itemType, value: out };
  }
  if (itemType === 'array') {
    const out = new Array<GgufArrayItems>(n);
    for (let i = 0; i < n; i++) out[i] = (await readArray(r)).value;
    return { itemType, value: out };
  }
  return { itemType, value: await readNumbers(r, itemType, n) };
}

async function readValue(r: ByteReader, type: GgufValueType): Promise<GgufValue> {
  switch (type) {
    case 'u8':
      return { type, value: await r.u8() };
    case 'i8':
      return { type, value: await r.i8() };
    case 'u16':
      return { type, value: await r.u16() };
    case 'i16':
      return { type, value: await r.i16() };
    case 'u32':
      return { type, value: await r.u32() };
    case 'i32':
      return { type, value: await r.i32() };
    case 'f32':
      return { type, value: await r.f32() };
    case 'f64':
      return { type, value: await r.f64() };
    case 'u64':
      return { type, value: await r.u64() };
    case 'i64':
      return { type, value: await r.i64() };
    case 'bool':
      return { type, value: (await r.u8()) !== 0 };
    case 'string':
      return { type, value: await readString(r) };
    case 'array':
      return { type, ...(await readArray(r)) };
  }
}

async function readVersion(r: ByteReader): Promise<2 | 3> {
  const magic = await r.u32();
  if (magic !== GGUF_MAGIC) throw new Error('not a GGUF file (it does not start with "GGUF")');
  const version = await r.u32();
  if (version === 2 || version === 3) return version;
  if (version === 0x02000000 || version === 0x03000000)
    throw new Error('a big-endian GGUF file: only little-endian GGUF is supported');
  if (version === 1)
    throw new Error('GGUF version 1 is not supported (llama.cpp dropped it too): convert the model again');
  throw new Error(`GGUF version ${version} is not supported (versions 2 and 3 are)`);
}

async function readTensorInfo(r: ByteReader): Promise<Omit<GgufTensorInfo, 'byteSize'>> {
  const name = await readString(r);
  const nDims = await r.u32();
  if (nDims < 1 || nDims > MAX_DIMS) throw new Error(`tensor ${name} has ${nDims} dimensions (1..${MAX_DIMS} allowed)`);
  const ne: number[] = [];
  for (let d = 0; d < nDims; d++) {
    const n = await r.u64();
    if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`tensor ${name} has a dimension of ${n}`);
    ne.push(Number(n));
  }
  const type = await r.u32();
  const offset = await r.u64();
  if (offset > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`tensor ${name} has offset ${offset}`);
  return { name, ne, type, offset: Number(offset) };
}

/** Parses the header; the reader is left at the end of the tensor table (`dataStart` minus the padding). */
export async function parseGgufHeader(reader: ByteReader): Promise<GgufHeader> {
  const version = await readVersion(reader);
  const nTensors = count(await reader.u64(), 'a tensor count of');
  const nKv = count(await reader.u64(), 'a metadata count of');
  const metadata = new GgufMetadata();
  for (let i = 0; i < nKv; i++) {
    const key = await readString(reader);
    try {
      if (metadata.has(key)) throw new Error('appears twice');
      metadata.set(key, await readValue(reader, valueType(await reader.u32())));
    } catch (e) {
      throw new Error(`GGUF metadata ${key}: ${(e as Error).message}`);
    }
  }
  const alignment = metadata.has('general.alignment') ? metadata.u32('general.alignment') : GGUF_DEFAULT_ALIGNMENT;
  if (alignment === 0 || (alignment & (alignment - 1)) !== 0)
    throw new Error(`GGUF metadata general.alignment is ${alignment}, not a power of two`);

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < nTensors; i++) {
    const t = await readTensorInfo(reader);
    if (names.has(t.name)) throw new Error(`tensor ${t.name} appears twice in the GGUF tensor table`);
    names.add(t.name);
    if (t.offset % alignment)
      throw new Error(`tensor ${t.name} starts at offset ${t.offset}, not a multiple of ${alignment}`);
    let byteSize: number | null = null;
    if (isKnownGgmlType(t.type)) {
      const { blockElements } = ggmlLayout(t.type);
      if (t.ne[0] % blockElements)
        throw new Error(`tensor ${t.name}: rows of ${t.ne[0]} values are not whole ${ggmlTypeName(t.type)} blocks`);
      byteSize = ggmlTensorBytes(t.type, t.ne);
    }
    tensors.push({ ...t, byteSize });
  }
  checkNoOverlap(tensors);
  const dataStart = Math.ceil(reader.position / alignment) * alignment;
  return { version, metadata, tensors, alignment, dataStart };
}

/** Tensors sorted by where their data lies: the order a streaming loader reads them in. */
export function tensorsByOffset(tensors: readonly GgufTensorInfo[]): GgufTensorInfo[] {
  return [...tensors].sort((a, b) => a.offset - b.offset);
}

function checkNoOverlap(tensors: readonly GgufTensorInfo[]): void {
  let end = 0;
  let last = '';
  for (const t of tensorsByOffset(tensors)) {
    if (t.offset < end) throw new Error(`tensors ${last} and ${t.name} overlap in the GGUF data`);
    if (t.byteSize !== null) {
      end = t.offset + t.byteSize;
      last = t.name;
    }
  }
}

/** Parses the header of a whole file or of a stream of chunks; returns the reader, positioned after it. */
export async function readGgufHeader(
  source: Uint8Array | AsyncIterable<Uint8Array>,
): Promise<{ header: GgufHeader; reader: ByteReader }> {
  const reader = byteReader(source);
  return { header: await parseGgufHeader(reader), reader };
}

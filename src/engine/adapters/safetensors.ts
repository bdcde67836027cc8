import { fromHalf, halfBits } from '../model/half.js';

/** The element types adapters are published in. */
export type SafeDtype = 'F32' | 'F16' | 'BF16';

/** One tensor of a safetensors file, widened to float32 (exactly: F32, F16 and BF16 are what adapters are published in). */
export interface SafeTensor {
  dims: number[];
  data: Float32Array;
}

const BYTES = { F32: 4, F16: 2, BF16: 2 } as const;

/**
 * A safetensors file (8-byte little-endian header length, a JSON header of `{name: {dtype, shape,
 * data_offsets}}`, then the data) as named float32 tensors. Throws an Error saying what is wrong with the
 * file (truncated, a header that is not JSON, a tensor past the end, a dtype it does not read); the caller
 * names the file.
 */
export function readSafetensors(bytes: Uint8Array): Map<string, SafeTensor> {
  if (bytes.length < 8) throw new Error(`it is truncated: ${bytes.length} bytes, less than the 8-byte header length`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = Number(view.getBigUint64(0, true));
  if (8 + headerLength > bytes.length)
    throw new Error(
      `it is truncated: its header says ${headerLength} bytes, the file has ${bytes.length - 8} after the length`,
    );
  let header: Record<string, { dtype?: unknown; shape?: unknown; data_offsets?: unknown }>;
  try {
    header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLength)));
  } catch {
    throw new Error('its header is not JSON: not a safetensors file');
  }
  const data = 8 + headerLength;
  const out = new Map<string, SafeTensor>();
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, data_offsets: offsets } = entry;
    if (dtype !== 'F32' && dtype !== 'F16' && dtype !== 'BF16')
      throw new Error(`tensor ${name} is ${String(dtype)}; adapters are read in F32, F16 or BF16`);
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0))
      throw new Error(`tensor ${name} has no valid shape`);
    if (!Array.isArray(offsets) || offsets.length !== 2) throw new Error(`tensor ${name} has no data_offsets`);
    const [begin, end] = offsets as number[];
    const count = (shape as number[]).reduce((n, d) => n * d, 1);
    if (end - begin !== count * BYTES[dtype])
      throw new Error(`tensor ${name}: ${end - begin} bytes for a ${dtype} tensor of shape [${shape}]`);
    if (data + end > bytes.length)
      throw new Error(`it is truncated: tensor ${name} ends at byte ${data + end}, the file has ${bytes.length}`);
    // Copied out: the source's bytes need not be aligned, and the file is let go once read.
    const raw = bytes.slice(data + begin, data + end);
    const values =
      dtype === 'F32'
        ? new Float32Array(raw.buffer)
        : dtype === 'F16'
          ? fromHalf(new Uint16Array(raw.buffer))
          : bf16(new Uint16Array(raw.buffer));
    out.set(name, { dims: shape as number[], data: values });
  }
  return out;
}

function bf16(src: Uint16Array): Float32Array {
  const bits = new Uint32Array(src.length);
  for (let i = 0; i < src.length; i++) bits[i] = src[i] << 16;
  return new Float32Array(bits.buffer);
}

/**
 * Writes tensors as a safetensors file, each value rounded to `dtype` (the test adapters' generator, and tests that
 * break one): F16 rounds to nearest even, BF16 truncates a value already representable (the generator's are).
 */
export function writeSafetensors(tensors: ReadonlyMap<string, SafeTensor>, dtype: SafeDtype = 'F32'): Uint8Array {
  const size = BYTES[dtype];
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype, shape: t.dims, data_offsets: [offset, offset + t.data.length * size] };
    offset += t.data.length * size;
  }
  let json = JSON.stringify(header);
  // Data aligned to 8 bytes, as the format's writers pad the header with spaces.
  while ((8 + json.length) % 8 !== 0) json += ' ';
  const head = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + head.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let at = 8 + head.length;
  for (const t of tensors.values()) {
    out.set(new Uint8Array(encode(t.data, dtype).buffer), at);
    at += t.data.length * size;
  }
  return out;
}

function encode(data: Float32Array, dtype: SafeDtype): Float32Array | Uint16Array {
  if (dtype === 'F32') return data.slice();
  if (dtype === 'F16') return Uint16Array.from(data, halfBits);
  return Uint16Array.from(new Uint32Array(data.slice().buffer), (bits) => bits >>> 16);
}

/** `data` as `dtype` stores it: what a reader of the written file gets back. */
export function roundTo(data: Float32Array, dtype: SafeDtype): Float32Array {
  if (dtype === 'F32') return data;
  if (dtype === 'F16') return fromHalf(Uint16Array.from(data, halfBits));
  return bf16(Uint16Array.from(new Uint32Array(data.slice().buffer), (bits) => bits >>> 16));
}

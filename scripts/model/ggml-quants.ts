// ggml's block formats as llama.cpp's reference quantizers write them (ggml-quants.c, quantize_row_*_ref),
// for the GGUF writer: the 32-value blocks here (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), the K-quants (Q4_K, Q5_K,
// Q6_K) in ggml-kquants.ts, and dequantizeRow for all of them in ggml-dequant.ts. Blocks run along a row
// (ggml's ne0). Every float operation is rounded to float32 (Math.fround) where the C code rounds, with no
// fused multiply-add, so for the same input the bytes equal what ggml's reference code produces when
// compiled without FMA contraction (its WebAssembly and generic x86-64 builds).
import { halfBits } from '../../src/engine/model/half.js';
import { GGML_TYPE, ggmlRowBytes, type GgmlTypeName } from '../../src/engine/formats/gguf/ggml-types.js';
import { quantizeQ4_K, quantizeQ5_K, quantizeQ6_K } from './ggml-kquants.js';

export { dequantizeRow } from './ggml-dequant.js';

export const QK = 32;
/** Bytes per block: f16 scale + 32 int8. */
export const Q8_0_BLOCK_BYTES = 2 + QK;
/** Bytes per block: f16 scale + 16 bytes of nibbles. */
export const Q4_0_BLOCK_BYTES = 2 + QK / 2;

export const f = Math.fround;
/** C's roundf: half away from zero (Math.round rounds half towards +∞). */
export const roundf = (x: number): number => Math.sign(x) * Math.round(Math.abs(x));

function blocks(src: Float32Array, type: string, size = QK): number {
  if (src.length % size) throw new Error(`${type} wants a multiple of ${size} values, got ${src.length}`);
  return src.length / size;
}

/** Quantizes `src` (length a multiple of 32) into `out` at `offset`: per block d = amax/127, q = round(x/d). */
export function quantizeQ8_0(src: Float32Array, out: Uint8Array, offset = 0): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const nb = blocks(src, 'Q8_0');
  for (let b = 0, o = offset; b < nb * QK; b += QK, o += Q8_0_BLOCK_BYTES) {
    let amax = 0;
    for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(src[b + j]));
    const d = f(amax / 127);
    const id = d ? f(1 / d) : 0;
    view.setUint16(o, halfBits(d), true);
    for (let j = 0; j < QK; j++) view.setInt8(o + 2 + j, roundf(f(src[b + j] * id)));
  }
}

/** The value of largest magnitude in src[b..b+32) (the first of equal magnitudes), with its sign. */
function signedMax(src: Float32Array, b: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < QK; j++) {
    const v = src[b + j];
    if (amax < Math.abs(v)) [amax, max] = [Math.abs(v), v];
  }
  return max;
}

/** Smallest and largest value of src[b..b+32). */
function range(src: Float32Array, b: number): [number, number] {
  let min = Infinity;
  let max = -Infinity;
  for (let j = 0; j < QK; j++) {
    min = Math.min(min, src[b + j]);
    max = Math.max(max, src[b + j]);
  }
  return [min, max];
}

/**
 * Per block the value of largest magnitude maps to -8 (d = max / -8), so the scale carries its sign and
 * the full range [-8, 7] is used. Stored as q + 8 in a nibble: byte j holds element j (low nibble) and
 * element j + 16 (high nibble).
 */
export function quantizeQ4_0(src: Float32Array, out: Uint8Array, offset = 0): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const nb = blocks(src, 'Q4_0');
  for (let b = 0, o = offset; b < nb * QK; b += QK, o += Q4_0_BLOCK_BYTES) {
    const d = f(signedMax(src, b) / -8);
    const id = d ? f(1 / d) : 0;
    view.setUint16(o, halfBits(d), true);
    // (int8_t)(x + 8.5f) truncates; x*id lies in [-8, 8], so this is round-half-up then a clamp to 15.
    const nibble = (x: number): number => Math.min(15, Math.trunc(f(f(x * id) + 8.5)));
    for (let j = 0; j < QK / 2; j++) out[o + 2 + j] = nibble(src[b + j]) | (nibble(src[b + j + QK / 2]) << 4);
  }
}

/** Per block x ≈ d·q + m with m the block's minimum, d = (max - min) / 15, q in 0..15; nibbles as Q4_0. */
export function quantizeQ4_1(src: Float32Array, out: Uint8Array, offset = 0): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const nb = blocks(src, 'Q4_1');
  for (let b = 0, o = offset; b < nb * QK; b += QK, o += 20) {
    const [min, max] = range(src, b);
    const d = f(f(max - min) / 15);
    const id = d ? f(1 / d) : 0;
    view.setUint16(o, halfBits(d), true);
    view.setUint16(o + 2, halfBits(min), true);
    const nibble = (x: number): number => Math.min(15, Math.trunc(f(f(f(x - min) * id) + 0.5)));
    for (let j = 0; j < QK / 2; j++) out[o + 4 + j] = nibble(src[b + j]) | (nibble(src[b + j + QK / 2]) << 4);
  }
}

/** Writes 5-bit values: low nibbles as Q4_0 at `qs`, the fifth bits as one little-endian u32 at `qh`. */
function putFiveBits(out: Uint8Array, qh: number, qs: number, q: (j: number) => number): void {
  let high = 0;
  for (let j = 0; j < QK / 2; j++) {
    const lo = q(j);
    const hi = q(j + QK / 2);
    out[qs + j] = (lo & 15) | ((hi & 15) << 4);
    high |= ((lo >> 4) << j) | ((hi >> 4) << (j + QK / 2));
  }
  new DataView(out.buffer, out.byteOffset).setUint32(qh, high >>> 0, true);
}

/** As Q4_0 with 5 bits: d = max / -16, q + 16 in 0..31. Block: d, 4 bytes of fifth bits, 16 of nibbles. */
export function quantizeQ5_0(src: Float32Array, out: Uint8Array, offset = 0): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const nb = blocks(src, 'Q5_0');
  for (let b = 0, o = offset; b < nb * QK; b += QK, o += 22) {
    const d = f(signedMax(src, b) / -16);
    const id = d ? f(1 / d) : 0;
    view.setUint16(o, halfBits(d), true);
    putFiveBits(out, o + 2, o + 6, (j) => Math.min(31, Math.trunc(f(f(src[b + j] * id) + 16.5))));
  }
}

/** As Q4_1 with 5 bits: d = (max - min) / 31. Block: d, m, 4 bytes of fifth bits, 16 of nibbles. */
export function quantizeQ5_1(src: Float32Array, out: Uint8Array, offset = 0): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const nb = blocks(src, 'Q5_1');
  for (let b = 0, o = offset; b < nb * QK; b += QK, o += 24) {
    const [min, max] = range(src, b);
    const d = f(f(max - min) / 31);
    const id = d ? f(1 / d) : 0;
    view.setUint16(o, halfBits(d), true);
    view.setUint16(o + 2, halfBits(min), true);
    // ggml has no clamp here: (max - min) * id rounds to at most 31.
    putFiveBits(out, o + 4, o + 8, (j) => Math.trunc(f(f(f(src[b + j] - min) * id) + 0.5)) & 0xff);
  }
}

/** bfloat16 bits of v, rounded to nearest even (ggml_compute_fp32_to_bf16; NaN stays a quiet NaN). */
export function bf16Bits(v: number): number {
  const u = new Uint32Array(Float32Array.of(v).buffer)[0];
  if ((u & 0x7fffffff) > 0x7f800000) return (u >>> 16) | 64;
  return ((u + (0x7fff + ((u >>> 16) & 1))) >>> 16) & 0xffff;
}

/** Types the writer can produce from float32 values. */
export type QuantType = Extract<
  GgmlTypeName,
  'F32' | 'F16' | 'BF16' | 'Q8_0' | 'Q4_0' | 'Q4_1' | 'Q5_0' | 'Q5_1' | 'Q4_K' | 'Q5_K' | 'Q6_K'
>;
export const QUANT_TYPES: readonly QuantType[] = [
  'F32',
  'F16',
  'BF16',
  'Q8_0',
  'Q4_0',
  'Q4_1',
  'Q5_0',
  'Q5_1',
  'Q4_K',
  'Q5_K',
  'Q6_K',
];

const QUANTIZERS: Record<
  Exclude<QuantType, 'F32' | 'F16' | 'BF16'>,
  (src: Float32Array, out: Uint8Array, offset?: number) => void
> = {
  Q8_0: quantizeQ8_0,
  Q4_0: quantizeQ4_0,
  Q4_1: quantizeQ4_1,
  Q5_0: quantizeQ5_0,
  Q5_1: quantizeQ5_1,
  Q4_K: quantizeQ4_K,
  Q5_K: quantizeQ5_K,
  Q6_K: quantizeQ6_K,
};

/**
 * The bytes of `src` (rows of `rowLength` values, row-major) in `type`. Blocks never straddle rows because
 * a row is a whole number of blocks, so the tensor quantises as one long row, as ggml does.
 */
export function quantize(type: QuantType, src: Float32Array, rowLength = src.length): Uint8Array {
  if (src.length % rowLength) throw new Error(`${src.length} values are not rows of ${rowLength}`);
  const out = new Uint8Array(ggmlRowBytes(GGML_TYPE[type], rowLength) * (src.length / rowLength));
  if (type === 'F32') out.set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength));
  else if (type === 'F16' || type === 'BF16') {
    const view = new DataView(out.buffer);
    const bits = type === 'F16' ? halfBits : bf16Bits;
    for (let i = 0; i < src.length; i++) view.setUint16(2 * i, bits(src[i]), true);
  } else QUANTIZERS[type](src, out);
  return out;
}

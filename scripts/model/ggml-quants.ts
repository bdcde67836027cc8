// ggml's Q8_0 and Q4_0 block formats, as llama.cpp's reference quantizers (ggml-quants.c,
// quantize_row_q8_0_ref / quantize_row_q4_0_ref) write them, for the GGUF writer. Blocks of 32 along a
// row (ggml's ne0). Arithmetic is rounded to float32 at each step like the C code, so for the same input
// the bytes match what llama.cpp's own quantizer produces.
import { halfBits } from '../../src/engine/model/half.js';

export const QK = 32;
/** Bytes per block: f16 scale + 32 int8. */
export const Q8_0_BLOCK_BYTES = 2 + QK;
/** Bytes per block: f16 scale + 16 bytes of nibbles. */
export const Q4_0_BLOCK_BYTES = 2 + QK / 2;

const f = Math.fround;
/** C's roundf: half away from zero (Math.round rounds half towards +∞). */
const roundf = (x: number): number => Math.sign(x) * Math.round(Math.abs(x));

/** Quantizes `src` (length a multiple of 32) into `out` at `offset`: per block d = amax/127, q = round(x/d). */
export function quantizeQ8_0(src: Float32Array, out: Uint8Array, offset = 0): void {
  if (src.length % QK) throw new Error(`Q8_0 wants a multiple of ${QK} values, got ${src.length}`);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0, o = offset; b < src.length; b += QK, o += Q8_0_BLOCK_BYTES) {
    let amax = 0;
    for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(src[b + j]));
    const d = f(amax / 127);
    const id = d ? f(1 / d) : 0;
    view.setUint16(o, halfBits(d), true);
    for (let j = 0; j < QK; j++) view.setInt8(o + 2 + j, roundf(f(src[b + j] * id)));
  }
}

/**
 * Per block the value of largest magnitude maps to -8 (d = max / -8), so the scale carries its sign and
 * the full range [-8, 7] is used. Stored as q + 8 in a nibble: byte j holds element j (low nibble) and
 * element j + 16 (high nibble).
 */
export function quantizeQ4_0(src: Float32Array, out: Uint8Array, offset = 0): void {
  if (src.length % QK) throw new Error(`Q4_0 wants a multiple of ${QK} values, got ${src.length}`);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0, o = offset; b < src.length; b += QK, o += Q4_0_BLOCK_BYTES) {
    let amax = 0;
    let max = 0;
    for (let j = 0; j < QK; j++) {
      const v = src[b + j];
      if (amax < Math.abs(v)) [amax, max] = [Math.abs(v), v];
    }
    const d = f(max / -8);
    const id = d ? f(1 / d) : 0;
    view.setUint16(o, halfBits(d), true);
    // (int8_t)(x + 8.5f) truncates; x*id lies in [-8, 8], so this is round-half-up then a clamp to 15.
    const nibble = (x: number): number => Math.min(15, Math.trunc(f(f(x * id) + 8.5)));
    for (let j = 0; j < QK / 2; j++) out[o + 2 + j] = nibble(src[b + j]) | (nibble(src[b + j + QK / 2]) << 4);
  }
}

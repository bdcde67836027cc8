// ggml's dequantize_row_* (ggml-quants.c) and its F16 / BF16 conversions: the float32 values a GGUF tensor
// stands for, rounded where the C code rounds (a product, then the subtraction of the min), so the results
// are bit-equal to ggml's without FMA. For tests and reference checks, not for serving.
import { GGML_TYPE, ggmlLayout, ggmlRowBytes, ggmlTypeName } from '../../src/engine/formats/gguf/ggml-types.js';
import { halfValue } from '../../src/engine/model/half.js';
import { scaleMinK4 } from './ggml-kquants.js';

const f = Math.fround;

type Dequantizer = (b: Uint8Array, v: DataView, out: Float32Array, nb: number) => void;

const half = (v: DataView, at: number): number => halfValue(v.getUint16(at, true));

/** Q4_0 / Q4_1 / Q5_0 / Q5_1 share one shape: per 32 values a scale, maybe a min, maybe fifth bits. */
function legacy(size: number, hasMin: boolean, fiveBits: boolean, offset: number): Dequantizer {
  return (b, v, out, nb) => {
    for (let i = 0; i < nb; i++) {
      const o = i * size;
      const d = half(v, o);
      const m = hasMin ? half(v, o + 2) : 0;
      const qh = fiveBits ? v.getUint32(o + (hasMin ? 4 : 2), true) : 0;
      const qs = o + (hasMin ? 4 : 2) + (fiveBits ? 4 : 0);
      for (let j = 0; j < 16; j++) {
        const lo = (b[qs + j] & 15) | (((qh >>> j) & 1) << 4);
        const hi = (b[qs + j] >> 4) | (((qh >>> (j + 16)) & 1) << 4);
        const y = (q: number): number => (hasMin ? f(q * d) + m : (q - offset) * d);
        out[32 * i + j] = y(lo);
        out[32 * i + j + 16] = y(hi);
      }
    }
  };
}

const DEQUANTIZERS: Record<number, Dequantizer> = {
  [GGML_TYPE.F32]: (b, _v, out) => out.set(new Float32Array(b.slice().buffer)),
  [GGML_TYPE.F16]: (_b, v, out) => {
    for (let i = 0; i < out.length; i++) out[i] = half(v, 2 * i);
  },
  [GGML_TYPE.BF16]: (_b, v, out) => {
    const bits = new Uint32Array(out.buffer, out.byteOffset, out.length);
    for (let i = 0; i < out.length; i++) bits[i] = v.getUint16(2 * i, true) << 16;
  },
  [GGML_TYPE.Q8_0]: (_b, v, out, nb) => {
    for (let i = 0; i < nb; i++) {
      const d = half(v, 34 * i);
      for (let j = 0; j < 32; j++) out[32 * i + j] = v.getInt8(34 * i + 2 + j) * d;
    }
  },
  [GGML_TYPE.Q4_0]: legacy(18, false, false, 8),
  [GGML_TYPE.Q4_1]: legacy(20, true, false, 0),
  [GGML_TYPE.Q5_0]: legacy(22, false, true, 16),
  [GGML_TYPE.Q5_1]: legacy(24, true, true, 0),
  [GGML_TYPE.Q4_K]: (b, v, out, nb) => {
    for (let i = 0; i < nb; i++) {
      const o = 144 * i;
      const [d, dmin] = [half(v, o), half(v, o + 2)];
      for (let j = 0, q = o + 16, y = 256 * i; j < 8; j += 2, q += 32, y += 64) {
        const [s1, m1] = scaleMinK4(j, b, o + 4);
        const [s2, m2] = scaleMinK4(j + 1, b, o + 4);
        const [d1, min1, d2, min2] = [f(d * s1), f(dmin * m1), f(d * s2), f(dmin * m2)];
        for (let l = 0; l < 32; l++) {
          out[y + l] = f(d1 * (b[q + l] & 15)) - min1;
          out[y + l + 32] = f(d2 * (b[q + l] >> 4)) - min2;
        }
      }
    }
  },
  [GGML_TYPE.Q5_K]: (b, v, out, nb) => {
    for (let i = 0; i < nb; i++) {
      const o = 176 * i;
      const [d, dmin] = [half(v, o), half(v, o + 2)];
      const qh = o + 16;
      for (let j = 0, q = o + 48, y = 256 * i; j < 8; j += 2, q += 32, y += 64) {
        const [s1, m1] = scaleMinK4(j, b, o + 4);
        const [s2, m2] = scaleMinK4(j + 1, b, o + 4);
        const [d1, min1, d2, min2] = [f(d * s1), f(dmin * m1), f(d * s2), f(dmin * m2)];
        const [u1, u2] = [1 << j, 2 << j]; // j = 2k for the k-th group of 64
        for (let l = 0; l < 32; l++) {
          out[y + l] = f(d1 * ((b[q + l] & 15) + (b[qh + l] & u1 ? 16 : 0))) - min1;
          out[y + l + 32] = f(d2 * ((b[q + l] >> 4) + (b[qh + l] & u2 ? 16 : 0))) - min2;
        }
      }
    }
  },
  [GGML_TYPE.Q6_K]: (b, v, out, nb) => {
    for (let i = 0; i < nb; i++) {
      const o = 210 * i;
      const d = half(v, o + 208);
      for (let n = 0, ql = o, qh = o + 128, sc = o + 192, y = 256 * i; n < 2; n++, ql += 64, qh += 32, sc += 8) {
        for (let l = 0; l < 32; l++) {
          const is = l >> 4;
          const q1 = ((b[ql + l] & 15) | ((b[qh + l] & 3) << 4)) - 32;
          const q2 = ((b[ql + l + 32] & 15) | (((b[qh + l] >> 2) & 3) << 4)) - 32;
          const q3 = ((b[ql + l] >> 4) | (((b[qh + l] >> 4) & 3) << 4)) - 32;
          const q4 = ((b[ql + l + 32] >> 4) | (((b[qh + l] >> 6) & 3) << 4)) - 32;
          out[y + 128 * n + l] = f(d * v.getInt8(sc + is)) * q1;
          out[y + 128 * n + l + 32] = f(d * v.getInt8(sc + is + 2)) * q2;
          out[y + 128 * n + l + 64] = f(d * v.getInt8(sc + is + 4)) * q3;
          out[y + 128 * n + l + 96] = f(d * v.getInt8(sc + is + 6)) * q4;
        }
      }
    }
  },
};

/**
 * The `n` float32 values that `bytes` (ggml type `type`, n a whole number of blocks) stand for. Throws
 * naming the type for one we cannot decode.
 */
export function dequantizeRow(type: number, bytes: Uint8Array, n: number): Float32Array {
  const decode = DEQUANTIZERS[type];
  if (!decode) throw new Error(`cannot dequantize ggml type ${ggmlTypeName(type)}`);
  const size = ggmlRowBytes(type, n);
  if (bytes.length < size) throw new Error(`${n} ${ggmlTypeName(type)} values need ${size} bytes, got ${bytes.length}`);
  const out = new Float32Array(n);
  const view = new DataView(bytes.buffer, bytes.byteOffset, size);
  decode(bytes.subarray(0, size), view, out, n / ggmlLayout(type).blockElements);
  return out;
}

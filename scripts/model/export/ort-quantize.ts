// Weight quantisation as onnxruntime's Python quantisers write it (the hub's model_q4 / _q4f16 / _int8 /
// _uint8 / _quantized files come out of them), with the dequantisers that give the values the runtime
// multiplies by. Ours (../quantize.ts) is a different, fixed format; these follow onnxruntime:
//
// MatMulNBits (MatMul4BitsQuantizer, QOperator format, MLAS BlockwiseQuantizer column-wise): W (K, N) in
// MatMul layout is cut along K into blocks of `blockSize` per output column n.
//   B            uint8 (N, kBlocks, blockSize * bits / 8); 4-bit: element 2j of a block in the low nibble
//                of byte j, 2j + 1 in the high nibble. Past K (a padded last block) the bytes are 0.
//   scales       (N * kBlocks), one per block, float32 (or float16 once a q4f16 export converts them)
//   zero_points  uint8 (N * ceil(kBlocks * bits / 8)), asymmetric only; 4-bit: block 2j in the low nibble
//   symmetric:   scale = -m / 2^(bits-1), m the block's value of largest magnitude with its sign; zero
//                point 2^(bits-1) (8 or 128), implied by the absent input
//   asymmetric:  lo = min(block, 0), hi = max(block, 0), scale = (hi - lo) / (2^bits - 1),
//                zp = clamp(roundf(-lo / scale), 0, 2^bits - 1)
//   q = clamp(roundf(w * (1 / scale) + zp), 0, 2^bits - 1), roundf = half away from zero;
//   w' = (q - zp) * scale.
//
// quantize_dynamic (ONNXQuantizer, IntegerOps mode) weights: one scale and zero point per tensor, or per
// output column with per_channel. int8 is symmetric: scale = max|w| / 127, zp 0, q in [-127, 127];
// uint8 is asymmetric: lo/hi as above, scale = (hi - lo) / 255, zp = round(-lo / scale), q in [0, 255].
// uint8 symmetric (an int8 export's embedding, quantised as an activation): scale = 2 max|w| / 255, zp 128.
// q = clip(round(w / scale) + zp), round = half to even (numpy); w' = (q - zp) * scale.
import { halfBits, halfValue } from '../../../src/engine/model/half.js';

const f = Math.fround;
/** C's roundf: half away from zero. */
const roundAway = (x: number): number => Math.sign(x) * Math.round(Math.abs(x));
/** numpy's round: half to even. */
function roundEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

export interface NBitsOptions {
  bits: 4 | 8;
  blockSize: number;
  symmetric: boolean;
  /** float16 scales (q4f16): rounded to half after quantising with the float32 scale, as a q4 model
   * converted to fp16 has them. */
  halfScales: boolean;
}

export interface NBitsMatrix {
  k: number;
  n: number;
  kBlocks: number;
  /** (n, kBlocks, blockSize * bits / 8) */
  packed: Uint8Array;
  /** (n * kBlocks), float32 values (already half-rounded when halfScales) */
  scales: Float32Array;
  /** (n * ceil(kBlocks * bits / 8)), asymmetric only */
  zeroPoints?: Uint8Array;
}

/** Quantises w (k, n), MatMul layout, as MatMul4BitsQuantizer does. */
export function quantizeNBits(w: Float32Array, k: number, n: number, o: NBitsOptions): NBitsMatrix {
  if (o.blockSize < 16 || (o.blockSize & (o.blockSize - 1)) !== 0)
    throw new Error(`block_size must be a power of two ≥ 16, got ${o.blockSize}`);
  const kBlocks = Math.ceil(k / o.blockSize);
  const blob = (o.blockSize * o.bits) / 8;
  const qMax = 2 ** o.bits - 1;
  const mid = 2 ** (o.bits - 1);
  const packed = new Uint8Array(n * kBlocks * blob);
  const scales = new Float32Array(n * kBlocks);
  const zpBytes = Math.ceil((kBlocks * o.bits) / 8);
  const zeroPoints = o.symmetric ? undefined : new Uint8Array(n * zpBytes);
  for (let col = 0; col < n; col++) {
    for (let b = 0; b < kBlocks; b++) {
      const end = Math.min(k, (b + 1) * o.blockSize);
      let lo = Infinity;
      let hi = -Infinity;
      for (let kk = b * o.blockSize; kk < end; kk++) {
        lo = Math.min(lo, w[kk * n + col]);
        hi = Math.max(hi, w[kk * n + col]);
      }
      let scale: number;
      let zp = mid;
      if (o.symmetric) {
        const m = Math.abs(hi) > Math.abs(lo) ? hi : lo;
        scale = f(-m / mid);
      } else {
        lo = Math.min(lo, 0);
        hi = Math.max(hi, 0);
        scale = f((hi - lo) / qMax);
        const zf = scale !== 0 ? f(-lo / scale) : lo;
        zp = zf < 0 ? 0 : zf > qMax ? qMax : roundAway(zf);
        if (o.bits === 8) zeroPoints![col * zpBytes + b] = zp;
        else zeroPoints![col * zpBytes + (b >> 1)] |= zp << ((b & 1) * 4);
      }
      const inv = scale !== 0 ? f(1 / scale) : 0;
      scales[col * kBlocks + b] = o.halfScales ? halfValue(halfBits(scale)) : scale;
      const base = (col * kBlocks + b) * blob;
      for (let kk = b * o.blockSize; kk < end; kk++) {
        const q = Math.min(qMax, Math.max(0, roundAway(f(f(w[kk * n + col] * inv) + zp))));
        const i = kk - b * o.blockSize;
        if (o.bits === 8) packed[base + i] = q;
        else packed[base + (i >> 1)] |= q << ((i & 1) * 4);
      }
    }
  }
  return { k, n, kBlocks, packed, scales, zeroPoints };
}

/** The (k, n) MatMul-layout matrix MatMulNBits multiplies by: (q - zp) * scale, read back from the packed bytes. */
export function dequantizeNBits(m: NBitsMatrix, bits: 4 | 8, blockSize: number): Float32Array {
  const out = new Float32Array(m.k * m.n);
  const blob = (blockSize * bits) / 8;
  const zpBytes = Math.ceil((m.kBlocks * bits) / 8);
  for (let col = 0; col < m.n; col++) {
    for (let kk = 0; kk < m.k; kk++) {
      const b = Math.floor(kk / blockSize);
      const i = kk % blockSize;
      const byte = m.packed[(col * m.kBlocks + b) * blob + (bits === 8 ? i : i >> 1)];
      const q = bits === 8 ? byte : (byte >> ((i & 1) * 4)) & 15;
      let zp = 2 ** (bits - 1);
      if (m.zeroPoints) {
        const z = m.zeroPoints[col * zpBytes + (bits === 8 ? b : b >> 1)];
        zp = bits === 8 ? z : (z >> ((b & 1) * 4)) & 15;
      }
      out[kk * m.n + col] = f((q - zp) * m.scales[col * m.kBlocks + b]);
    }
  }
  return out;
}

export type Int8Type = 'int8' | 'uint8';

export interface Linear8 {
  type: Int8Type;
  /** same layout as the input matrix */
  data: Int8Array | Uint8Array;
  /** one per tensor, or one per column (n) */
  scale: Float32Array;
  zeroPoint: Int8Array | Uint8Array;
}

/**
 * Quantises m (rows, cols) as quantize_dynamic writes a weight: per tensor, or per column (a MatMul
 * weight's output channel) when perColumn. int8 symmetric, uint8 asymmetric unless `symmetric` says otherwise.
 */
export function quantizeLinear8(
  m: Float32Array,
  rows: number,
  cols: number,
  type: Int8Type,
  perColumn: boolean,
  symmetric = type === 'int8',
): Linear8 {
  const groups = perColumn ? cols : 1;
  const scale = new Float32Array(groups);
  const zeroPoint = type === 'int8' ? new Int8Array(groups) : new Uint8Array(groups);
  const data = type === 'int8' ? new Int8Array(rows * cols) : new Uint8Array(rows * cols);
  const [qMin, qMax] = type === 'int8' ? (symmetric ? [-127, 127] : [-128, 127]) : [0, 255];
  for (let gi = 0; gi < groups; gi++) {
    const at = (i: number) => (perColumn ? i * cols + gi : i);
    const count = perColumn ? rows : rows * cols;
    let lo = 0;
    let hi = 0;
    for (let i = 0; i < count; i++) {
      lo = Math.min(lo, m[at(i)]);
      hi = Math.max(hi, m[at(i)]);
    }
    if (symmetric) {
      const a = Math.max(-lo, hi);
      [lo, hi] = [-a, a];
    }
    let s = f(f(hi - lo) / (qMax - qMin));
    let zp: number;
    if (s < 1.1754943508222875e-38) {
      s = 1;
      zp = 0;
    } else zp = symmetric ? roundEven((qMin + qMax) / 2) : roundEven(qMin - f(lo / s));
    scale[gi] = s;
    zeroPoint[gi] = zp;
    for (let i = 0; i < count; i++) data[at(i)] = Math.min(qMax, Math.max(qMin, roundEven(f(m[at(i)] / s)) + zp));
  }
  return { type, data, scale, zeroPoint };
}

/** (q - zp) * scale, as DequantizeLinear and MatMulInteger's output scaling compute it. */
export function dequantizeLinear8(q: Linear8, rows: number, cols: number): Float32Array {
  const perColumn = q.scale.length > 1;
  const out = new Float32Array(rows * cols);
  for (let i = 0; i < rows * cols; i++) {
    const gi = perColumn ? i % cols : 0;
    out[i] = f((q.data[i] - q.zeroPoint[gi]) * q.scale[gi]);
  }
  return out;
}

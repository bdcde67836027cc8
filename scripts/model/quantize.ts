// Block-wise symmetric weight quantisation in the com.microsoft MatMulNBits layout.
//
// MatMulNBits computes Y = A @ W with W (K, N) stored transposed and blocked along K:
//   B      uint8  (N, k_blocks, block_size * bits / 8)   element k of column n at block k / bs
//   scales float  (N, k_blocks)
// 4-bit: two values per byte, the lower k in the low nibble. No zero_points input, so ORT uses the
// default zero point 2^(bits-1) (8 or 128); w = (q - zp) * scale. Symmetric absmax scaling:
// scale = max|w| / 7 (4-bit) or / 127 (8-bit), so q - zp is in [-7, 7] / [-127, 127].
// K that is not a multiple of block_size is padded with zero weights (q = zp).

export const BLOCK_SIZE = 32;

export interface NBitsWeight {
  bits: 4 | 8;
  blockSize: number;
  k: number;
  n: number;
  kBlocks: number;
  /** (n, kBlocks, blockSize * bits / 8) */
  packed: Uint8Array;
  /** (n, kBlocks) */
  scales: Float32Array;
}

/** Quantises w (k, n) in MatMul [in, out] layout. */
export function quantizeMatMulWeight(
  w: Float32Array,
  k: number,
  n: number,
  bits: 4 | 8,
  blockSize = BLOCK_SIZE,
): NBitsWeight {
  return quantizeRows(w, k, n, bits, blockSize, (kk, nn) => kk * n + nn);
}

/** Quantises rows of m (rows, cols) along cols: the (vocab, hidden) embedding is already (N, K). */
export function quantizeRowMajor(
  m: Float32Array,
  rows: number,
  cols: number,
  bits: 4 | 8,
  blockSize = BLOCK_SIZE,
): NBitsWeight {
  return quantizeRows(m, cols, rows, bits, blockSize, (kk, nn) => nn * cols + kk);
}

function quantizeRows(
  src: Float32Array,
  k: number,
  n: number,
  bits: 4 | 8,
  blockSize: number,
  at: (kk: number, nn: number) => number,
): NBitsWeight {
  const kBlocks = Math.ceil(k / blockSize);
  const blob = (blockSize * bits) / 8;
  const packed = new Uint8Array(n * kBlocks * blob);
  const scales = new Float32Array(n * kBlocks);
  const qmax = bits === 4 ? 7 : 127;
  const zp = bits === 4 ? 8 : 128;
  const block = new Float32Array(blockSize);
  for (let nn = 0; nn < n; nn++) {
    for (let b = 0; b < kBlocks; b++) {
      let absmax = 0;
      for (let i = 0; i < blockSize; i++) {
        const kk = b * blockSize + i;
        const v = kk < k ? src[at(kk, nn)] : 0;
        block[i] = v;
        absmax = Math.max(absmax, Math.abs(v));
      }
      // Math.fround: the runtime multiplies by the stored float32 scale, so round with that scale.
      const scale = Math.fround(absmax / qmax);
      scales[nn * kBlocks + b] = scale;
      const base = (nn * kBlocks + b) * blob;
      for (let i = 0; i < blockSize; i++) {
        const q = scale === 0 ? zp : Math.min(qmax, Math.max(-qmax, Math.round(block[i] / scale))) + zp;
        if (bits === 8) packed[base + i] = q;
        else packed[base + (i >> 1)] |= i & 1 ? q << 4 : q;
      }
    }
  }
  return { bits, blockSize, k, n, kBlocks, packed, scales };
}

/** Dequantised value of element (kk, nn), for tests and error measurement. */
export function dequantAt(w: NBitsWeight, kk: number, nn: number): number {
  const b = Math.floor(kk / w.blockSize);
  const i = kk % w.blockSize;
  const blob = (w.blockSize * w.bits) / 8;
  const base = (nn * w.kBlocks + b) * blob;
  const q = w.bits === 8 ? w.packed[base + i] : (w.packed[base + (i >> 1)] >> ((i & 1) * 4)) & 15;
  return (q - (w.bits === 8 ? 128 : 8)) * w.scales[nn * w.kBlocks + b];
}

/** w (k, n) after a quantise/dequantise round trip: what MatMulNBits multiplies by. */
export function roundTripMatMulWeight(w: Float32Array, k: number, n: number, bits: 4 | 8): Float32Array {
  const q = quantizeMatMulWeight(w, k, n, bits);
  const out = new Float32Array(k * n);
  for (let kk = 0; kk < k; kk++) for (let nn = 0; nn < n; nn++) out[kk * n + nn] = dequantAt(q, kk, nn);
  return out;
}

/** m (rows, cols) after a row-wise quantise/dequantise round trip (the embedding). */
export function roundTripRowMajor(m: Float32Array, rows: number, cols: number, bits: 4 | 8): Float32Array {
  const q = quantizeRowMajor(m, rows, cols, bits);
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[r * cols + c] = dequantAt(q, c, r);
  return out;
}

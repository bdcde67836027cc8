// Block-quantised matrix products over MatMulNBits weights, read where they lie in linear memory:
//   W (N, K/32, 32 * bits / 8) uint8 with zero point 2^(bits-1), scales ws (N, K/32) float32.
//   8-bit: byte i of a block is element i. 4-bit: byte j holds element 2j (low nibble) and 2j+1 (high).
// Activations arrive quantised per block of 32 of their own row (quantize_rows): xq int16, xs float32.
// Per block the integer dot product is exact (i32x4.dot_i16x8_s), so its order does not matter; the
// float part is acc += float(isum) * (xs * ws) per lane, in block order, then hsum: the same operations
// for an element whatever the tile. A tile of up to 4 rows shares each unpacked weight block.
#include "kernels.h"

/** Lane-wise sum of the four products of one block: w0..w3 and x0..x3 are 8 int16 each. */
static inline v128_t block_dot(v128_t w0, v128_t w1, v128_t w2, v128_t w3, const short *x) {
  v128_t s = wasm_i32x4_dot_i16x8(w0, wasm_v128_load(x));
  s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(w1, wasm_v128_load(x + 8)));
  s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(w2, wasm_v128_load(x + 16)));
  return wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(w3, wasm_v128_load(x + 24)));
}

static inline v128_t scaled(v128_t acc, v128_t isum, float scale) {
  return wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(isum), wasm_f32x4_splat(scale)));
}

/** One 8-bit weight block as four int16x8: bytes minus 128. */
static inline void unpack_q8(const unsigned char *b, v128_t *w) {
  v128_t lo = wasm_v128_xor(wasm_v128_load(b), wasm_i8x16_splat((char)0x80)); // q - 128 as int8
  v128_t hi = wasm_v128_xor(wasm_v128_load(b + 16), wasm_i8x16_splat((char)0x80));
  w[0] = wasm_i16x8_extend_low_i8x16(lo);
  w[1] = wasm_i16x8_extend_high_i8x16(lo);
  w[2] = wasm_i16x8_extend_low_i8x16(hi);
  w[3] = wasm_i16x8_extend_high_i8x16(hi);
}

/** One 4-bit weight block as four int16x8: low nibbles (even elements) first, then high (odd), minus 8. */
static inline void unpack_q4(const unsigned char *b, v128_t *w) {
  v128_t bytes = wasm_v128_load(b);
  v128_t eight = wasm_i8x16_splat(8);
  v128_t lo = wasm_i8x16_sub(wasm_v128_and(bytes, wasm_i8x16_splat(0x0f)), eight);
  v128_t hi = wasm_i8x16_sub(wasm_u8x16_shr(bytes, 4), eight);
  w[0] = wasm_i16x8_extend_low_i8x16(lo);
  w[1] = wasm_i16x8_extend_high_i8x16(lo);
  w[2] = wasm_i16x8_extend_low_i8x16(hi);
  w[3] = wasm_i16x8_extend_high_i8x16(hi);
}

static inline void unpack(const unsigned char *b, int bits, v128_t *w) {
  if (bits == 8) unpack_q8(b, w);
  else unpack_q4(b, w);
}

/** Four rows, one column: the weight block is unpacked once for the four. */
static void q_4rows_col(float *y, int ystride, const short *xq, const float *xs, const unsigned char *wrow, const float *ws,
                        int K, int blocks, int bits) {
  int blob = 4 * bits;
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0;
  for (int b = 0; b < blocks; b++) {
    v128_t w[4];
    unpack(wrow + b * blob, bits, w);
    const short *x = xq + b * 32;
    a0 = scaled(a0, block_dot(w[0], w[1], w[2], w[3], x), xs[b] * ws[b]);
    a1 = scaled(a1, block_dot(w[0], w[1], w[2], w[3], x + K), xs[blocks + b] * ws[b]);
    a2 = scaled(a2, block_dot(w[0], w[1], w[2], w[3], x + 2 * K), xs[2 * blocks + b] * ws[b]);
    a3 = scaled(a3, block_dot(w[0], w[1], w[2], w[3], x + 3 * K), xs[3 * blocks + b] * ws[b]);
  }
  y[0] = hsum(a0);
  y[ystride] = hsum(a1);
  y[2 * ystride] = hsum(a2);
  y[3 * ystride] = hsum(a3);
}

/**
 * Y (M, N) = X (M, K) @ W^T for `bits` 8 or 4. X is given quantised: xq (M, K) int16 (for 4-bit, each
 * block deinterleaved: even elements then odd), xs (M, K/32). K is a multiple of 32 (padded).
 */
void EXPORT(matmul_q)(float *Y, const short *xq, const float *xs, const unsigned char *W, const float *ws, int M, int K, int N, int bits) {
  int blocks = K / 32, blob = 4 * bits;
  size_t wstride = (size_t)blocks * blob;
  int m = 0;
  for (; m + 4 <= M; m += 4)
    for (int n = 0; n < N; n++)
      q_4rows_col(Y + (size_t)m * N + n, N, xq + (size_t)m * K, xs + (size_t)m * blocks, W + n * wstride, ws + (size_t)n * blocks, K, blocks, bits);
  for (; m < M; m++) {
    const short *x = xq + (size_t)m * K;
    const float *s = xs + (size_t)m * blocks;
    // One row, one column at a time: measured faster than sharing the row's activation loads between two
    // columns (10.3 against 8.0 GMAC/s at M = 1), whose extra live vectors spill.
    for (int n = 0; n < N; n++) {
      v128_t acc = wasm_f32x4_splat(0);
      for (int b = 0; b < blocks; b++) {
        v128_t w[4];
        unpack(W + n * wstride + b * blob, bits, w);
        acc = scaled(acc, block_dot(w[0], w[1], w[2], w[3], x + b * 32), s[b] * ws[(size_t)n * blocks + b]);
      }
      Y[(size_t)m * N + n] = hsum(acc);
    }
  }
}

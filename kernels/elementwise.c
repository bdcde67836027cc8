// Row-wise kernels of the Llama block: RMSNorm, RoPE, SwiGLU, residual add, embedding rows, and the
// per-block activation quantisation the integer matrix kernels take.
#include "kernels.h"

// With -nostdlib the compiler may still emit calls to these for plain loops.
void *memset(void *dst, int c, size_t n) {
  unsigned char *d = dst;
  while (n--) *d++ = (unsigned char)c;
  return dst;
}

void *memcpy(void *dst, const void *src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  while (n--) *d++ = *s++;
  return dst;
}

/** Sum of squares of x[0..n) in one fixed order: four lanes over i, then hsum, then the scalar tail. */
static float sum_squares(const float *x, int n) {
  v128_t acc = wasm_f32x4_splat(0.0f);
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = wasm_v128_load(x + i);
    acc = wasm_f32x4_add(acc, wasm_f32x4_mul(v, v));
  }
  float s = hsum(acc);
  for (; i < n; i++) s += x[i] * x[i];
  return s;
}

/** out (rows, n) = x / sqrt(mean(x^2) + eps) * w (n); out may be x. */
void EXPORT(rmsnorm)(float *out, const float *x, const float *w, int rows, int n, float eps) {
  for (int r = 0; r < rows; r++, x += n, out += n) {
    float scale = 1.0f / __builtin_sqrtf(sum_squares(x, n) / (float)n + eps);
    v128_t s = wasm_f32x4_splat(scale);
    int i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(out + i, wasm_f32x4_mul(wasm_f32x4_mul(wasm_v128_load(x + i), s), wasm_v128_load(w + i)));
    for (; i < n; i++) out[i] = x[i] * scale * w[i];
  }
}

/**
 * Hugging Face RoPE in place over x (rows, heads, head_dim): per head, x1 = x[:hd/2], x2 = x[hd/2:],
 * x1' = x1*cos - x2*sin, x2' = x2*cos + x1*sin, with cos/sin (rows, hd/2) per row's position.
 * `row_stride` is the floats between rows (q and k live in one buffer each with their own width).
 */
void EXPORT(rope)(float *x, const float *cos, const float *sin, int rows, int heads, int head_dim, int row_stride) {
  int half_dim = head_dim / 2;
  for (int r = 0; r < rows; r++) {
    const float *c = cos + r * half_dim, *s = sin + r * half_dim;
    for (int h = 0; h < heads; h++) {
      float *x1 = x + r * row_stride + h * head_dim, *x2 = x1 + half_dim;
      int j = 0;
      for (; j + 4 <= half_dim; j += 4) {
        v128_t a = wasm_v128_load(x1 + j), b = wasm_v128_load(x2 + j);
        v128_t cj = wasm_v128_load(c + j), sj = wasm_v128_load(s + j);
        wasm_v128_store(x1 + j, wasm_f32x4_sub(wasm_f32x4_mul(a, cj), wasm_f32x4_mul(b, sj)));
        wasm_v128_store(x2 + j, wasm_f32x4_add(wasm_f32x4_mul(b, cj), wasm_f32x4_mul(a, sj)));
      }
      for (; j < half_dim; j++) {
        float a = x1[j], b = x2[j];
        x1[j] = a * c[j] - b * s[j];
        x2[j] = b * c[j] + a * s[j];
      }
    }
  }
}

/** gate (n) = silu(gate) * up = gate * sigmoid(gate) * up, in place; n is padded to 4 by the caller. */
void EXPORT(silu_mul)(float *gate, const float *up, int n) {
  v128_t one = wasm_f32x4_splat(1.0f);
  for (int i = 0; i < n; i += 4) {
    v128_t g = wasm_v128_load(gate + i);
    v128_t sig = wasm_f32x4_div(one, wasm_f32x4_add(one, exp_f32x4(wasm_f32x4_neg(g))));
    wasm_v128_store(gate + i, wasm_f32x4_mul(wasm_f32x4_mul(g, sig), wasm_v128_load(up + i)));
  }
}

/** x (n) += y (n); n is padded to 4 by the caller. */
void EXPORT(add_inplace)(float *x, const float *y, int n) {
  for (int i = 0; i < n; i += 4) wasm_v128_store(x + i, wasm_f32x4_add(wasm_v128_load(x + i), wasm_v128_load(y + i)));
}

/** out (n) = row `id` of a float16 (vocab, n) table, as float32. */
void EXPORT(embed_f16)(float *out, const half *table, int id, int n) {
  const half *row = table + (size_t)id * n;
  for (int i = 0; i < n; i++) out[i] = half_to_f32(row[i]);
}

/** out (n) = row `id` of an 8-bit block table (vocab, n/32, 32) with zero point 128 and scales (vocab, n/32). */
void EXPORT(embed_q8)(float *out, const unsigned char *q, const float *scales, int id, int n) {
  int blocks = n / 32;
  const unsigned char *row = q + (size_t)id * n;
  for (int b = 0; b < blocks; b++) {
    float s = scales[(size_t)id * blocks + b];
    for (int i = 0; i < 32; i++) out[b * 32 + i] = (float)((int)row[b * 32 + i] - 128) * s;
  }
}

/**
 * Quantises x (rows, k) per block of 32 of each row, never across rows: xq (rows, blocks * 32) int16
 * holding round(x / s) in [-127, 127] with s = max|x_block| / 127 per block in xs (rows, blocks); a k
 * short of blocks * 32 is padded with zeros, as the weights are. Widening to int16 here, once, is what
 * lets the matrix kernels multiply with i32x4.dot_i16x8_s directly.
 * `deinterleave`: within each block store the even elements first, then the odd ones, the order in
 * which a 4-bit block's low and high nibbles come out of one byte load.
 */
void EXPORT(quantize_rows)(short *xq, float *xs, const float *x, int rows, int k, int blocks, int deinterleave) {
  float block[32];
  for (int r = 0; r < rows; r++) {
    for (int b = 0; b < blocks; b++) {
      const float *src = x + (size_t)r * k + b * 32;
      short *dst = xq + ((size_t)r * blocks + b) * 32;
      int n = k - b * 32 < 32 ? k - b * 32 : 32;
      for (int i = 0; i < 32; i++) block[i] = i < n ? src[i] : 0.0f;
      v128_t m = wasm_f32x4_splat(0);
      for (int i = 0; i < 32; i += 4) m = wasm_f32x4_max(m, wasm_f32x4_abs(wasm_v128_load(block + i)));
      m = wasm_f32x4_max(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));
      m = wasm_f32x4_max(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
      float absmax = wasm_f32x4_extract_lane(m, 0);
      xs[(size_t)r * blocks + b] = absmax / 127.0f;
      v128_t inv = wasm_f32x4_splat(absmax == 0.0f ? 0.0f : 127.0f / absmax);
      if (deinterleave) { // even elements to dst[0..16), odd ones to dst[16..32)
        for (int i = 0; i < 32; i++) dst[(i & 1) * 16 + (i >> 1)] = (short)__builtin_nearbyintf(block[i] * (absmax == 0.0f ? 0.0f : 127.0f / absmax));
        continue;
      }
      for (int i = 0; i < 32; i += 8) {
        v128_t lo = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(block + i), inv)));
        v128_t hi = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(block + i + 4), inv)));
        wasm_v128_store(dst + i, wasm_i16x8_narrow_i32x4(lo, hi));
      }
    }
  }
}

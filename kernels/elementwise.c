// Row-wise kernels of the Llama block: RMSNorm, RoPE, SwiGLU (and Gemma's GeGLU), residual add, embedding rows, and the
// per-block activation quantisation the integer matrix kernels take.
#include "quant.h"

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

/**
 * gate (n) = gelu_tanh(gate) * up in place (Gemma's GeGLU, PyTorch's gelu approximate="tanh"):
 * 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as x * sigmoid(2u), the same
 * function, from exp alone; n is padded to 4 by the caller.
 */
void EXPORT(gelu_tanh_mul)(float *gate, const float *up, int n) {
  v128_t one = wasm_f32x4_splat(1.0f), c = wasm_f32x4_splat(0.044715f);
  v128_t minus_two_k = wasm_f32x4_splat(-2.0f * 0.7978845608028654f);
  for (int i = 0; i < n; i += 4) {
    v128_t x = wasm_v128_load(gate + i);
    v128_t u = wasm_f32x4_mul(wasm_f32x4_add(x, wasm_f32x4_mul(c, wasm_f32x4_mul(x, wasm_f32x4_mul(x, x)))), minus_two_k);
    v128_t g = wasm_f32x4_div(x, wasm_f32x4_add(one, exp_f32x4(u)));
    wasm_v128_store(gate + i, wasm_f32x4_mul(g, wasm_v128_load(up + i)));
  }
}

/** x (n) *= s: Gemma's embedding scale (sqrt(hidden)); n is padded to 4 by the caller. */
void EXPORT(scale_inplace)(float *x, float s, int n) {
  v128_t v = wasm_f32x4_splat(s);
  for (int i = 0; i < n; i += 4) wasm_v128_store(x + i, wasm_f32x4_mul(wasm_v128_load(x + i), v));
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

/** out (n) = row `id` of a bfloat16 (vocab, n) table, as float32 (exact: bf16 is float32's top half). */
void EXPORT(embed_bf16)(float *out, const unsigned short *table, int id, int n) {
  const unsigned short *row = table + (size_t)id * n;
  for (int i = 0; i < n; i++) {
    union { unsigned u; float f; } v = {(unsigned)row[i] << 16};
    out[i] = v.f;
  }
}

/**
 * Quantises x (rows, k) per block of 32 of each row, never across rows: xq (rows, blocks * 32) holding
 * a = round(x / s) in [-127, 127] with s = max|x_block| / 127 per block in xs (rows, blocks), and the exact
 * sums of each half block's a in xsum (rows, blocks, 2), which zero points and mins need. A k short of
 * blocks * 32 is padded with zeros, as the weights are. int8 for relaxed SIMD's dot product, int16 (widened
 * here, once) for baseline SIMD's dot_i16x8: the same integers either way.
 */
void EXPORT(quantize_rows)(act_t *xq, float *xs, int *xsum, const float *x, int rows, int k, int blocks) {
  float padded[32];
  for (int r = 0; r < rows; r++) {
    for (int b = 0; b < blocks; b++) {
      const float *src = x + (size_t)r * k + b * 32;
      act_t *dst = xq + ((size_t)r * blocks + b) * 32;
      int n = k - b * 32 < 32 ? k - b * 32 : 32;
      // A whole block is read where it lies; only a short last one is copied out and padded.
      const float *block = src;
      if (n < 32) {
        for (int i = 0; i < 32; i++) padded[i] = i < n ? src[i] : 0.0f;
        block = padded;
      }
      float absmax = abs_max(block, 32);
      xs[(size_t)r * blocks + b] = absmax / 127.0f;
      v128_t inv = wasm_f32x4_splat(absmax == 0.0f ? 0.0f : 127.0f / absmax);
      v128_t q[8];
      for (int i = 0; i < 8; i++) q[i] = round_i8_lanes(wasm_f32x4_mul(wasm_v128_load(block + 4 * i), inv));
      v128_t s0 = wasm_i32x4_add(wasm_i32x4_add(q[0], q[1]), wasm_i32x4_add(q[2], q[3]));
      v128_t s1 = wasm_i32x4_add(wasm_i32x4_add(q[4], q[5]), wasm_i32x4_add(q[6], q[7]));
      int *sums = xsum + ((size_t)r * blocks + b) * 2;
      sums[0] = wasm_i32x4_extract_lane(s0, 0) + wasm_i32x4_extract_lane(s0, 1) + wasm_i32x4_extract_lane(s0, 2) + wasm_i32x4_extract_lane(s0, 3);
      sums[1] = wasm_i32x4_extract_lane(s1, 0) + wasm_i32x4_extract_lane(s1, 1) + wasm_i32x4_extract_lane(s1, 2) + wasm_i32x4_extract_lane(s1, 3);
#ifdef RELAXED
      for (int i = 0; i < 8; i += 4)
        wasm_v128_store(dst + i * 4, wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(q[i], q[i + 1]), wasm_i16x8_narrow_i32x4(q[i + 2], q[i + 3])));
#else
      for (int i = 0; i < 8; i += 2) wasm_v128_store(dst + i * 4, wasm_i16x8_narrow_i32x4(q[i], q[i + 1]));
#endif
    }
  }
}

// Attention straight over the paged KV pool: no gather, no scatter copy of the past.
//
// Pool layout per layer (the engine's BlockPool): keys and values each (num_blocks, kv_heads,
// block_size, head_dim) float32 (or float16 with kv_half). Token j of a sequence lives in block
// table[j / block_size] at offset j % block_size. head_dim is a multiple of 4.
#include "kernels.h"

/**
 * Stores `count` new tokens' keys and values, k and v (count, kv_heads * head_dim), at positions
 * start .. start + count - 1 of the sequence whose block table is `table`.
 */
void EXPORT(kv_write)(float *kpool, float *vpool, const int *table, int start, int count, const float *k, const float *v,
                      int kv_heads, int head_dim, int block_size) {
  for (int t = 0; t < count; t++) {
    int pos = start + t;
    size_t base = ((size_t)table[pos / block_size] * kv_heads * block_size + pos % block_size) * head_dim;
    for (int h = 0; h < kv_heads; h++) {
      float *kd = kpool + base + (size_t)h * block_size * head_dim, *vd = vpool + base + (size_t)h * block_size * head_dim;
      const float *ks = k + ((size_t)t * kv_heads + h) * head_dim, *vs = v + ((size_t)t * kv_heads + h) * head_dim;
      for (int d = 0; d < head_dim; d += 4) {
        wasm_v128_store(kd + d, wasm_v128_load(ks + d));
        wasm_v128_store(vd + d, wasm_v128_load(vs + d));
      }
    }
  }
}

/** Same, with a float16 pool (KV_DTYPE fp16): keys and values rounded to nearest even. */
static half f32_to_half(float f) {
  union { float f; unsigned u; } in = {f};
  unsigned u = in.u, sign = (u >> 16) & 0x8000;
  unsigned mag = u & 0x7fffffff;
  if (mag >= 0x7f800000) return (half)(sign | 0x7c00 | (mag > 0x7f800000 ? 0x200 : 0)); // inf, nan
  if (mag >= 0x477ff000) return (half)(sign | 0x7c00); // rounds past the largest half
  if (mag < 0x38800000) { // half subnormal (or zero): add 0.5 to shift the bits into place, exactly rounded
    union { unsigned u; float f; } m = {mag}, bias = {0x3f000000};
    union { float f; unsigned u; } r = {m.f + bias.f};
    return (half)(sign | (r.u - 0x3f000000));
  }
  unsigned odd = (mag >> 13) & 1;
  mag += 0xc8000fff + odd; // rebias the exponent (-112 << 23) and round to nearest even
  return (half)(sign | (mag >> 13));
}

void EXPORT(kv_write_f16)(half *kpool, half *vpool, const int *table, int start, int count, const float *k, const float *v,
                          int kv_heads, int head_dim, int block_size) {
  for (int t = 0; t < count; t++) {
    int pos = start + t;
    size_t base = ((size_t)table[pos / block_size] * kv_heads * block_size + pos % block_size) * head_dim;
    for (int h = 0; h < kv_heads; h++) {
      half *kd = kpool + base + (size_t)h * block_size * head_dim, *vd = vpool + base + (size_t)h * block_size * head_dim;
      const float *ks = k + ((size_t)t * kv_heads + h) * head_dim, *vs = v + ((size_t)t * kv_heads + h) * head_dim;
      for (int d = 0; d < head_dim; d++) {
        kd[d] = f32_to_half(ks[d]);
        vd[d] = f32_to_half(vs[d]);
      }
    }
  }
}

/** p[0..n) = exp(p - max) in place, returning their sum (lanes, then hsum: depends on n alone). */
static float softmax_numerators(float *p, int n) {
  float max = p[0];
  for (int j = 1; j < n; j++) max = p[j] > max ? p[j] : max;
  // The caller leaves room for n rounded up to 4; the padding lanes are zeroed after exp.
  for (int j = n; j < ((n + 3) & ~3); j++) p[j] = max;
  v128_t m = wasm_f32x4_splat(max), sum = wasm_f32x4_splat(0);
  for (int j = 0; j < n; j += 4) {
    v128_t e = exp_f32x4(wasm_f32x4_sub(wasm_v128_load(p + j), m));
    if (j + 4 > n) { // zero the padding
      v128_t lane = wasm_i32x4_make(j, j + 1, j + 2, j + 3);
      e = wasm_v128_and(e, wasm_i32x4_lt(lane, wasm_i32x4_splat(n)));
    }
    wasm_v128_store(p + j, e);
    sum = wasm_f32x4_add(sum, e);
  }
  return hsum(sum);
}

/**
 * One sequence's `count` new tokens (positions start .. start + count - 1) attend to its first
 * start + t + 1 keys, read in place from the pool through `table`; their own keys were written by
 * kv_write first. q and out: (count, heads * head_dim). kv_half: the pool holds float16.
 *
 * Each key and value is read once for every query that sees it: all `count` tokens and all heads of its
 * KV group (GQA) take their turn on it while it is in cache. What each (token, head) computes is still
 * its own: scores in key order with one dot product each, its softmax, then its values added in key
 * order; so its result does not depend on which tokens run beside it (prefix-cache invariance).
 * `scores`: scratch of count * (heads / kv_heads) * (start + count + 4) floats.
 */
void EXPORT(attention)(float *out, const float *q, const void *kpool, const void *vpool, const int *table, int start, int count,
                       int heads, int kv_heads, int head_dim, int block_size, float scale, float *scores, int kv_half) {
  int group = heads / kv_heads, total = start + count;
  int stride = (total + 4) & ~3; // floats per (token, head) score row, room for softmax's padding
  size_t head_stride = (size_t)block_size * head_dim, block_stride = kv_heads * head_stride;
  for (int g = 0; g < kv_heads; g++) {
    size_t head_off = (size_t)g * head_stride;
    // Scores: key j is seen by tokens t with start + t >= j.
    for (int j = 0; j < total; j++) {
      size_t at = (size_t)table[j / block_size] * block_stride + head_off + (size_t)(j % block_size) * head_dim;
      for (int t = j > start ? j - start : 0; t < count; t++) {
        for (int i = 0; i < group; i++) {
          const float *qh = q + ((size_t)t * heads + g * group + i) * head_dim;
          float s = kv_half ? dot_f16(qh, (const half *)kpool + at, head_dim) : dot_f32(qh, (const float *)kpool + at, head_dim);
          scores[((size_t)t * group + i) * stride + j] = s * scale;
        }
      }
    }
    for (int t = 0; t < count; t++)
      for (int i = 0; i < group; i++) {
        float *p = scores + ((size_t)t * group + i) * stride;
        float inv = 1.0f / softmax_numerators(p, start + t + 1);
        p[total] = inv; // kept beside the row: the values pass below scales by it at the end
        float *o = out + ((size_t)t * heads + g * group + i) * head_dim;
        for (int d = 0; d < head_dim; d += 4) wasm_v128_store(o + d, wasm_f32x4_splat(0));
      }
    // Values, in key order for every (token, head).
    for (int j = 0; j < total; j++) {
      size_t at = (size_t)table[j / block_size] * block_stride + head_off + (size_t)(j % block_size) * head_dim;
      for (int t = j > start ? j - start : 0; t < count; t++) {
        for (int i = 0; i < group; i++) {
          v128_t p = wasm_f32x4_splat(scores[((size_t)t * group + i) * stride + j]);
          float *o = out + ((size_t)t * heads + g * group + i) * head_dim;
          for (int d = 0; d < head_dim; d += 8) {
            v128_t v0, v1;
            if (kv_half) half8_to_f32(wasm_v128_load((const half *)vpool + at + d), &v0, &v1);
            else {
              v0 = wasm_v128_load((const float *)vpool + at + d);
              v1 = wasm_v128_load((const float *)vpool + at + d + 4);
            }
            wasm_v128_store(o + d, wasm_f32x4_add(wasm_v128_load(o + d), wasm_f32x4_mul(p, v0)));
            wasm_v128_store(o + d + 4, wasm_f32x4_add(wasm_v128_load(o + d + 4), wasm_f32x4_mul(p, v1)));
          }
        }
      }
    }
    for (int t = 0; t < count; t++)
      for (int i = 0; i < group; i++) {
        v128_t inv = wasm_f32x4_splat(scores[((size_t)t * group + i) * stride + total]);
        float *o = out + ((size_t)t * heads + g * group + i) * head_dim;
        for (int d = 0; d < head_dim; d += 4) wasm_v128_store(o + d, wasm_f32x4_mul(wasm_v128_load(o + d), inv));
      }
  }
}

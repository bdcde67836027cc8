// What both attention paths share: the pool's layout, its chunks, and the softmax. See attention.c.
#pragma once
#include "kernels.h"

// Keys and values are taken a chunk at a time: up to CHUNK consecutive tokens of one pool block, for one KV
// head, contiguous there. A float16 or 8-bit chunk is widened once into a float32 copy (exact for float16;
// q * scale, one rounding, for 8 bits) that every query of the step reads, instead of once per (query, key).
#define CHUNK 16
#define MAX_HEAD_DIM 256

/** How many keys from j0 on make one chunk: at most CHUNK, never past the end of j0's block or of the keys. */
static inline int chunk_len(int j0, int total, int block_size) {
  int n = block_size - j0 % block_size;
  if (n > CHUNK) n = CHUNK;
  return n < total - j0 ? n : total - j0;
}

/** The pool's element type: attention's kv_type argument. */
enum { KV_F32 = 0, KV_F16 = 1, KV_I8 = 2 };

/** Which row of a pool holds token j0 of KV head g: its block through `table`, then its place there. */
static inline size_t row_at(const int *table, int j0, int g, int kv_heads, int block_size) {
  return ((size_t)table[j0 / block_size] * kv_heads + g) * block_size + j0 % block_size;
}

/** Where query a of KV group g (queries in (token, head of the group) order) lies in q and in out. */
static inline size_t query_at(int a, int group, int heads, int g, int head_dim) {
  return ((size_t)(a / group) * heads + g * group + a % group) * head_dim;
}

/** The first key a token at position pos sees: a sliding window's (window > 0) start, else 0. */
static inline int window_lo(int window, int pos) {
  return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

/** The scale of an 8-bit row: max |x| / 127 (a zero row keeps 0, and its values stay 0). */
static inline float row_scale_i8(const float *x, int head_dim) {
  return abs_max(x, head_dim) / 127.0f;
}

/**
 * x[0..8) / s rounded to nearest even as eight int16 lanes: an 8-bit row's values (clamped to [-127, 127], so
 * any input stays in range; s is 1 for a zero row, so nothing divides by zero).
 */
static inline v128_t round_row8(const float *x, float scale) {
  v128_t s = wasm_f32x4_splat(scale > 0 ? scale : 1.0f);
  v128_t a = round_i8_lanes(wasm_f32x4_div(wasm_v128_load(x), s));
  v128_t b = round_i8_lanes(wasm_f32x4_div(wasm_v128_load(x + 4), s));
  return wasm_i16x8_narrow_i32x4(a, b);
}

/** How many of the chunk's n keys from j0 on token t (position start + t) sees. */
static inline int seen_of(int t, int start, int j0, int n) {
  return start + t + 1 - j0 < n ? start + t + 1 - j0 : n;
}

/** max p[lo..n), four lanes at a time (a max is exact, so the order does not matter); n > lo. */
static inline float row_max(const float *p, int lo, int n) {
  v128_t mx = wasm_f32x4_splat(p[lo]);
  int j = lo;
  for (; j + 4 <= n; j += 4) mx = wasm_f32x4_pmax(mx, wasm_v128_load(p + j));
  mx = wasm_f32x4_pmax(mx, wasm_i32x4_shuffle(mx, mx, 2, 3, 0, 1));
  mx = wasm_f32x4_pmax(mx, wasm_i32x4_shuffle(mx, mx, 1, 0, 3, 2));
  float max = wasm_f32x4_extract_lane(mx, 0);
  for (; j < n; j++) max = p[j] > max ? p[j] : max;
  return max;
}

/**
 * p[lo..n) = exp(p - max) in place, returning their sum (lanes, then hsum: depends on lo and n alone), and
 * p[first..lo) = 0 (a sliding window's keys left behind; first <= lo, a multiple of 4). Lanes are p's own
 * 4-aligned columns, so where the row starts does not change a sum: what lies before lo adds exact zeros.
 */
static inline float softmax_numerators(float *p, int first, int lo, int n) {
  float max = row_max(p, lo, n);
  // The caller leaves room for n rounded up to 4; the padding lanes are zeroed after exp.
  for (int j = n; j < ((n + 3) & ~3); j++) p[j] = max;
  v128_t m = wasm_f32x4_splat(max), sum = wasm_f32x4_splat(0);
  for (int j = first; j < n; j += 4) {
    v128_t e = exp_f32x4(wasm_f32x4_sub(wasm_v128_load(p + j), m));
    if (j + 4 > n || j < lo) { // zero the padding and what the window left behind (scored or not)
      v128_t lane = wasm_i32x4_make(j, j + 1, j + 2, j + 3);
      e = wasm_v128_and(e, wasm_v128_and(wasm_i32x4_lt(lane, wasm_i32x4_splat(n)), wasm_i32x4_ge(lane, wasm_i32x4_splat(lo))));
    }
    wasm_v128_store(p + j, e);
    sum = wasm_f32x4_add(sum, e);
  }
  return hsum(sum);
}

/**
 * attention() over an 8-bit pool, in integers (attention_i8.c): the same arguments, kv_type aside.
 */
void attention_i8(float *out, const float *q, const signed char *kpool, const signed char *vpool, const int *table, int start,
                  int count, int heads, int kv_heads, int head_dim, int block_size, float scale, float *scores, int window);

// Attention straight over the paged KV pool: no gather, no scatter copy of the past.
//
// Pool layout per layer (the engine's BlockPool): keys and values each (num_blocks, kv_heads,
// block_size, row) where a row is one (token, KV head): head_dim float32 or float16 elements, or, in an
// 8-bit pool, head_dim int8 then their float32 scale (head_dim + 4 bytes). Token j of a sequence lives in
// block table[j / block_size] at offset j % block_size. head_dim is a multiple of 8.
#include "attention.h"

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

/**
 * One (token, head) row to 8 bits, symmetric: scale = max |x| / 127, q = x / scale rounded to nearest even,
 * the scale stored after the row. Every step is one IEEE operation, so every build and engine stores the
 * same bytes, and a row's bytes depend on that row alone (batch invariance).
 */
static void quantize_row_i8(signed char *dst, const float *x, int head_dim) {
  float scale = row_scale_i8(x, head_dim);
  for (int d = 0; d < head_dim; d += 8) {
    v128_t q = round_row8(x + d, scale);
    wasm_v128_store64_lane(dst + d, wasm_i8x16_narrow_i16x8(q, q), 0);
  }
  wasm_v128_store32_lane(dst + head_dim, wasm_f32x4_splat(scale), 0);
}

/** Same as kv_write, with an 8-bit pool (KV_DTYPE int8): each (token, head) row quantised on its own. */
void EXPORT(kv_write_i8)(signed char *kpool, signed char *vpool, const int *table, int start, int count, const float *k,
                         const float *v, int kv_heads, int head_dim, int block_size) {
  size_t row = (size_t)head_dim + 4;
  for (int t = 0; t < count; t++) {
    int pos = start + t;
    for (int h = 0; h < kv_heads; h++) {
      size_t at = (((size_t)table[pos / block_size] * kv_heads + h) * block_size + pos % block_size) * row;
      quantize_row_i8(kpool + at, k + ((size_t)t * kv_heads + h) * head_dim, head_dim);
      quantize_row_i8(vpool + at, v + ((size_t)t * kv_heads + h) * head_dim, head_dim);
    }
  }
}

/** n 8-bit rows (head_dim int8, then the row's scale) widened to float32 rows: q * scale. */
static void widen_rows_i8(float *buf, const signed char *rows, int n, int head_dim) {
  for (int k = 0; k < n; k++) {
    const signed char *r = rows + (size_t)k * (head_dim + 4);
    v128_t s = wasm_v128_load32_splat(r + head_dim);
    float *o = buf + (size_t)k * head_dim;
    for (int d = 0; d < head_dim; d += 8) {
      v128_t q = wasm_i16x8_extend_low_i8x16(wasm_v128_load64_zero(r + d));
      wasm_v128_store(o + d, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(q)), s));
      wasm_v128_store(o + d + 4, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(q)), s));
    }
  }
}

/** Tokens [j0, j0 + n) of KV head g's chunk as float32: in place for a float32 pool, else widened into buf. */
static const float *chunk_f32(const void *pool, const int *table, int j0, int g, int n, int kv_heads, int head_dim,
                              int block_size, int kv_type, float *buf) {
  size_t row = row_at(table, j0, g, kv_heads, block_size);
  if (kv_type == KV_F32) return (const float *)pool + row * head_dim;
  if (kv_type == KV_I8) {
    widen_rows_i8(buf, (const signed char *)pool + row * (head_dim + 4), n, head_dim);
    return buf;
  }
  const half *h = (const half *)pool + row * head_dim;
  for (int e = 0; e < n * head_dim; e += 8) half8_to_f32(wasm_v128_load(h + e), (v128_t *)(buf + e), (v128_t *)(buf + e + 4));
  return buf;
}

/**
 * row[k] = scale * (qh . keys[k]) for k in [0, n): each dot product in dot_f32's order (one lane chain
 * over d, then hsum), four keys at a time so the four chains overlap instead of waiting on each other.
 */
static void score_chunk(float *row, const float *qh, const float *keys, int n, int head_dim, float scale) {
  int k = 0;
  for (; k + 4 <= n; k += 4) {
    const float *k0 = keys + (size_t)k * head_dim;
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0;
    for (int d = 0; d < head_dim; d += 4) {
      v128_t x = wasm_v128_load(qh + d);
      a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(x, wasm_v128_load(k0 + d)));
      a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(x, wasm_v128_load(k0 + head_dim + d)));
      a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(x, wasm_v128_load(k0 + 2 * head_dim + d)));
      a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(x, wasm_v128_load(k0 + 3 * head_dim + d)));
    }
    row[k] = hsum(a0) * scale;
    row[k + 1] = hsum(a1) * scale;
    row[k + 2] = hsum(a2) * scale;
    row[k + 3] = hsum(a3) * scale;
  }
  for (; k < n; k++) row[k] = dot_f32(qh, keys + (size_t)k * head_dim, head_dim) * scale;
}

/** add_values for elements d.. of o only (the last head_dim % 16), four at a time. */
static void add_values_from(float *o, const float *p, const float *values, int n, int head_dim, int d) {
  for (; d < head_dim; d += 4) {
    v128_t o0 = wasm_v128_load(o + d);
    for (int k = 0; k < n; k++) o0 = wasm_f32x4_add(o0, wasm_f32x4_mul(wasm_f32x4_splat(p[k]), wasm_v128_load(values + (size_t)k * head_dim + d)));
    wasm_v128_store(o + d, o0);
  }
}

/**
 * o[0..head_dim) += p[k] * values[k] for k = 0, 1, ..., n - 1: each element's sum in key order, as when
 * keys are taken one at a time, but o is held in registers across the chunk (16 elements at a time).
 */
static void add_values(float *o, const float *p, const float *values, int n, int head_dim) {
  int d = 0;
  for (; d + 16 <= head_dim; d += 16) {
    v128_t o0 = wasm_v128_load(o + d), o1 = wasm_v128_load(o + d + 4), o2 = wasm_v128_load(o + d + 8), o3 = wasm_v128_load(o + d + 12);
    for (int k = 0; k < n; k++) {
      const float *v = values + (size_t)k * head_dim + d;
      v128_t pk = wasm_f32x4_splat(p[k]);
      o0 = wasm_f32x4_add(o0, wasm_f32x4_mul(pk, wasm_v128_load(v)));
      o1 = wasm_f32x4_add(o1, wasm_f32x4_mul(pk, wasm_v128_load(v + 4)));
      o2 = wasm_f32x4_add(o2, wasm_f32x4_mul(pk, wasm_v128_load(v + 8)));
      o3 = wasm_f32x4_add(o3, wasm_f32x4_mul(pk, wasm_v128_load(v + 12)));
    }
    wasm_v128_store(o + d, o0);
    wasm_v128_store(o + d + 4, o1);
    wasm_v128_store(o + d + 8, o2);
    wasm_v128_store(o + d + 12, o3);
  }
  add_values_from(o, p, values, n, head_dim, d);
}

/**
 * score_chunk for two queries at once over their first n keys (a second query may see more: its caller
 * scores those alone): each key is loaded once for both, eight chains in flight; every dot product is still
 * dot_f32's own order.
 */
static void score_chunk2(float *row_a, float *row_b, const float *qa, const float *qb, const float *keys, int n, int head_dim, float scale) {
  int k = 0;
  for (; k + 4 <= n; k += 4) {
    const float *k0 = keys + (size_t)k * head_dim;
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int d = 0; d < head_dim; d += 4) {
      v128_t x = wasm_v128_load(qa + d), y = wasm_v128_load(qb + d);
      v128_t w0 = wasm_v128_load(k0 + d), w1 = wasm_v128_load(k0 + head_dim + d);
      v128_t w2 = wasm_v128_load(k0 + 2 * head_dim + d), w3 = wasm_v128_load(k0 + 3 * head_dim + d);
      a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(x, w0));
      a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(x, w1));
      a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(x, w2));
      a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(x, w3));
      b0 = wasm_f32x4_add(b0, wasm_f32x4_mul(y, w0));
      b1 = wasm_f32x4_add(b1, wasm_f32x4_mul(y, w1));
      b2 = wasm_f32x4_add(b2, wasm_f32x4_mul(y, w2));
      b3 = wasm_f32x4_add(b3, wasm_f32x4_mul(y, w3));
    }
    row_a[k] = hsum(a0) * scale;
    row_a[k + 1] = hsum(a1) * scale;
    row_a[k + 2] = hsum(a2) * scale;
    row_a[k + 3] = hsum(a3) * scale;
    row_b[k] = hsum(b0) * scale;
    row_b[k + 1] = hsum(b1) * scale;
    row_b[k + 2] = hsum(b2) * scale;
    row_b[k + 3] = hsum(b3) * scale;
  }
  score_chunk(row_a + k, qa, keys + (size_t)k * head_dim, n - k, head_dim, scale);
  score_chunk(row_b + k, qb, keys + (size_t)k * head_dim, n - k, head_dim, scale);
}

/** add_values for two queries over their first n keys: each value loaded once for both, each sum in key order. */
static void add_values2(float *oa, float *ob, const float *pa, const float *pb, const float *values, int n, int head_dim) {
  int d = 0;
  for (; d + 16 <= head_dim; d += 16) {
    v128_t a0 = wasm_v128_load(oa + d), a1 = wasm_v128_load(oa + d + 4), a2 = wasm_v128_load(oa + d + 8), a3 = wasm_v128_load(oa + d + 12);
    v128_t b0 = wasm_v128_load(ob + d), b1 = wasm_v128_load(ob + d + 4), b2 = wasm_v128_load(ob + d + 8), b3 = wasm_v128_load(ob + d + 12);
    for (int k = 0; k < n; k++) {
      const float *v = values + (size_t)k * head_dim + d;
      v128_t v0 = wasm_v128_load(v), v1 = wasm_v128_load(v + 4), v2 = wasm_v128_load(v + 8), v3 = wasm_v128_load(v + 12);
      v128_t x = wasm_f32x4_splat(pa[k]), y = wasm_f32x4_splat(pb[k]);
      a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(x, v0));
      a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(x, v1));
      a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(x, v2));
      a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(x, v3));
      b0 = wasm_f32x4_add(b0, wasm_f32x4_mul(y, v0));
      b1 = wasm_f32x4_add(b1, wasm_f32x4_mul(y, v1));
      b2 = wasm_f32x4_add(b2, wasm_f32x4_mul(y, v2));
      b3 = wasm_f32x4_add(b3, wasm_f32x4_mul(y, v3));
    }
    wasm_v128_store(oa + d, a0);
    wasm_v128_store(oa + d + 4, a1);
    wasm_v128_store(oa + d + 8, a2);
    wasm_v128_store(oa + d + 12, a3);
    wasm_v128_store(ob + d, b0);
    wasm_v128_store(ob + d + 4, b1);
    wasm_v128_store(ob + d + 8, b2);
    wasm_v128_store(ob + d + 12, b3);
  }
  add_values_from(oa, pa, values, n, head_dim, d);
  add_values_from(ob, pb, values, n, head_dim, d);
}

/**
 * One sequence's `count` new tokens (positions start .. start + count - 1) attend to its first
 * start + t + 1 keys, read in place from the pool through `table`; their own keys were written by
 * kv_write first. q and out: (count, heads * head_dim). kv_type: the pool's elements (KV_F32, KV_F16, KV_I8).
 * window > 0: a sliding-window layer's, where the token at position p sees keys p - window + 1 .. p only;
 * keys before the first token's window are not read, and those between it and a later token's get weight 0.
 *
 * Each chunk of keys and values is read once for every query that sees it: all `count` tokens and all heads
 * of its KV group (GQA) take their turn on it while it is in cache. What each (token, head) computes is
 * still its own: scores in key order with one dot product each, its softmax, then its values added in key
 * order; so its result does not depend on which tokens run beside it (prefix-cache invariance) nor on the
 * chunking. `scores`: scratch of count * (heads / kv_heads) * (start + count + 4) floats. head_dim: a
 * multiple of 8, at most MAX_HEAD_DIM.
 */
void EXPORT(attention)(float *out, const float *q, const void *kpool, const void *vpool, const int *table, int start, int count,
                       int heads, int kv_heads, int head_dim, int block_size, float scale, float *scores, int kv_type,
                       int window) {
  if (kv_type == KV_I8) {
    attention_i8(out, q, kpool, vpool, table, start, count, heads, kv_heads, head_dim, block_size, scale, scores, window);
    return;
  }
  int group = heads / kv_heads, total = start + count;
  // Where token t's window begins, and the first key read (4-aligned, so softmax's lanes keep their columns).
#define WINDOW_LO(t) window_lo(window, start + (t))
  int first = WINDOW_LO(0) & ~3;
  int stride = (total + 4) & ~3; // floats per (token, head) score row, room for softmax's padding
  float buf[CHUNK * MAX_HEAD_DIM] __attribute__((aligned(16)));
  for (int g = 0; g < kv_heads; g++) {
    // Scores. Token t sees keys j <= start + t.
    for (int j0 = first, n; j0 < total; j0 += n) {
      n = chunk_len(j0, total, block_size);
      const float *keys = chunk_f32(kpool, table, j0, g, n, kv_heads, head_dim, block_size, kv_type, buf);
      // Queries in (token, head) order, two at a time: the second sees at least the first's keys.
      for (int a = (j0 > start ? j0 - start : 0) * group; a < count * group; a += 2) {
        float *row_a = scores + (size_t)a * stride + j0;
        const float *qa = q + query_at(a, group, heads, g, head_dim);
        int seen_a = seen_of(a / group, start, j0, n);
        if (a + 1 == count * group) {
          score_chunk(row_a, qa, keys, seen_a, head_dim, scale);
          break;
        }
        float *row_b = row_a + stride;
        const float *qb = q + query_at(a + 1, group, heads, g, head_dim);
        int seen_b = seen_of((a + 1) / group, start, j0, n);
        score_chunk2(row_a, row_b, qa, qb, keys, seen_a, head_dim, scale);
        score_chunk(row_b + seen_a, qb, keys + (size_t)seen_a * head_dim, seen_b - seen_a, head_dim, scale);
      }
    }
    for (int a = 0; a < count * group; a++) {
      float *p = scores + (size_t)a * stride;
      // Beside the row: the values pass scales by it last.
      p[total] = 1.0f / softmax_numerators(p, first, WINDOW_LO(a / group), start + a / group + 1);
      float *o = out + query_at(a, group, heads, g, head_dim);
      for (int d = 0; d < head_dim; d += 4) wasm_v128_store(o + d, wasm_f32x4_splat(0));
    }
    // Values, in key order for every (token, head).
    for (int j0 = first, n; j0 < total; j0 += n) {
      n = chunk_len(j0, total, block_size);
      const float *values = chunk_f32(vpool, table, j0, g, n, kv_heads, head_dim, block_size, kv_type, buf);
      for (int a = (j0 > start ? j0 - start : 0) * group; a < count * group; a += 2) {
        float *oa = out + query_at(a, group, heads, g, head_dim);
        const float *pa = scores + (size_t)a * stride + j0;
        int seen_a = seen_of(a / group, start, j0, n);
        if (a + 1 == count * group) {
          add_values(oa, pa, values, seen_a, head_dim);
          break;
        }
        float *ob = out + query_at(a + 1, group, heads, g, head_dim);
        const float *pb = pa + stride;
        int seen_b = seen_of((a + 1) / group, start, j0, n);
        add_values2(oa, ob, pa, pb, values, seen_a, head_dim);
        add_values(ob, pb + seen_a, values + (size_t)seen_a * head_dim, seen_b - seen_a, head_dim);
      }
    }
    for (int a = 0; a < count * group; a++) {
      v128_t inv = wasm_f32x4_splat(scores[(size_t)a * stride + total]);
      float *o = out + query_at(a, group, heads, g, head_dim);
      for (int d = 0; d < head_dim; d += 4) wasm_v128_store(o + d, wasm_f32x4_mul(wasm_v128_load(o + d), inv));
    }
  }
#undef WINDOW_LO
}

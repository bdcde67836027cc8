// Attention over an 8-bit pool (KV_DTYPE int8), in integers.
//
// Each query row is rounded to 8 bits as a cache row is (attention.h's round_row8), so a score is an exact
// int32 sum of head_dim products of 8-bit values, times the key row's scale and the query's. The values are
// weighted the same way: each weight (softmax numerator times the value row's scale) is rounded to 16 bits
// against one scale per chunk of vchunk(head_dim) keys, and each weighted sum of a chunk is an exact int32 sum.
// i32x4.dot_i16x8_s does 8 multiply-adds an instruction where float32 takes a multiply and an add for 4; and
// since integer sums are exact in any order, tiles can share loads freely without changing a bit. A decode step's
// few queries (DIRECT_QUERIES) read the keys as they lie instead, with relaxed SIMD's 8-bit dot product: the same sums.
//
// The softmax is folded into the values pass: scores are kept in log2 units (log2 e is in each query's
// factor), and each numerator 2^(score - max) is taken as its chunk's weights are rounded, its lane sums
// kept beside (4-aligned columns in key order, as softmax_numerators sums them).
//
// What a query computes depends on that query alone: its own rounding, the chunks of absolute positions
// [V c, V (c + 1)), V = vchunk(head_dim), that its value weights are rounded in, whatever the batch, the prefix or the
// pool's block size. Every step is an integer operation or one IEEE float32 operation, so every build and
// every engine give the same bits.
#include "attention.h"

/** Queries (token, head of the group) that take their turn on a chunk while it is widened. */
#define QBLOCK 64
/**
 * Blocks of at most this many queries take their own paths: keys scored where the pool holds them (the relaxed
 * builds), since with so few queries widening and transposing each chunk costs more than it saves; and weighted
 * values with every query a tile slot, not two to a pair. A decode step's block is one token's heads of a KV group
 * (3 on SmolLM2, up to 8 for any model whose query heads per KV head are at most 8); a prefill's last block may be
 * this small too.
 */
#define DIRECT_QUERIES 8
/** The most keys whose value weights share one scale: 128 x 32767 x 127 stays inside int32. */
#define VCHUNK 128

/**
 * Keys whose value weights share one scale, by head size: 128 up to head_dim 128, else 64, so a chunk's
 * widened values fit the buffer (and the per-chunk steps are spread over as many keys as fit).
 */
static inline int vchunk(int head_dim) {
  return head_dim <= 128 ? VCHUNK : VCHUNK / 2;
}

/** The integer path's working memory, on the kernels' stack (about 96 KiB at MAX_HEAD_DIM). */
typedef struct {
  // Rows at strides known when compiling, so a tile reads its rows at constant offsets from one pointer; the
  // spare rows let a tile at the block's end read past its last query (what it computes there is dropped).
  short q[(QBLOCK + 3) * MAX_HEAD_DIM];              // the block's queries in 8 bits, held as int16
  float q_factor[QBLOCK];                            // each query's row scale times attention's scale
  v128_t keys[(MAX_HEAD_DIM / 2) * (CHUNK / 4)];     // a chunk's keys: keys[p * 4 + b] = keys 4b..4b+3, dims 2p, 2p+1
  float key_scale[CHUNK];
  v128_t values[(VCHUNK / 2) * (128 / 4)];           // values[m * head_dim / 4 + b] = keys 2m, 2m+1 at dims 4b..4b+3
  float value_scale[VCHUNK];
  short w[(QBLOCK + 1) * VCHUNK];                    // each query's weights of the chunk, 16 bits, VCHUNK apart
  float w_factor[QBLOCK + 1];                        // their scale
  float max[QBLOCK];                                 // each query's largest score
  v128_t sum[QBLOCK];                                // and the lane sums of its numerators so far
#ifdef RELAXED
  signed char q_pos[DIRECT_QUERIES * MAX_HEAD_DIM];  // a direct block's queries as 7-bit halves: q = q_pos - q_neg
  signed char q_neg[DIRECT_QUERIES * MAX_HEAD_DIM];
#endif
} work_t;

_Static_assert(sizeof(work_t) <= 100 * 1024, "work_t lives on the kernels' 128 KiB stack (kernels/build.sh)");

static const signed char zero_row[MAX_HEAD_DIM] __attribute__((aligned(16)));

/** The 4 x 4 transpose of int32 lanes: out[i] lane j = in[j] lane i. */
static inline void transpose4(v128_t *out, v128_t x0, v128_t x1, v128_t x2, v128_t x3) {
  v128_t t0 = wasm_i32x4_shuffle(x0, x1, 0, 4, 1, 5), t1 = wasm_i32x4_shuffle(x2, x3, 0, 4, 1, 5);
  v128_t t2 = wasm_i32x4_shuffle(x0, x1, 2, 6, 3, 7), t3 = wasm_i32x4_shuffle(x2, x3, 2, 6, 3, 7);
  out[0] = wasm_i64x2_shuffle(t0, t1, 0, 2);
  out[CHUNK / 4] = wasm_i64x2_shuffle(t0, t1, 1, 3);
  out[2 * (CHUNK / 4)] = wasm_i64x2_shuffle(t2, t3, 0, 2);
  out[3 * (CHUNK / 4)] = wasm_i64x2_shuffle(t2, t3, 1, 3);
}

/** The chunk's n key rows (at most CHUNK, contiguous) widened to int16, pairs of dims across four keys. */
static void widen_keys(work_t *w, const signed char *rows, int n, int head_dim) {
  for (int b = 0; b < CHUNK / 4; b++) {
    const signed char *r[4];
    for (int i = 0; i < 4; i++) r[i] = 4 * b + i < n ? rows + (size_t)(4 * b + i) * (head_dim + 4) : zero_row;
    // Each row's dims as int32 lanes (a pair each, sign-extended to int16); the transpose makes them pair-major.
    int d = 0;
    for (; d + 16 <= head_dim; d += 16) {
      v128_t x0 = wasm_v128_load(r[0] + d), x1 = wasm_v128_load(r[1] + d);
      v128_t x2 = wasm_v128_load(r[2] + d), x3 = wasm_v128_load(r[3] + d);
      v128_t *k = w->keys + (d / 2) * (CHUNK / 4) + b;
      transpose4(k, wasm_i16x8_extend_low_i8x16(x0), wasm_i16x8_extend_low_i8x16(x1), wasm_i16x8_extend_low_i8x16(x2),
                 wasm_i16x8_extend_low_i8x16(x3));
      transpose4(k + 4 * (CHUNK / 4), wasm_i16x8_extend_high_i8x16(x0), wasm_i16x8_extend_high_i8x16(x1),
                 wasm_i16x8_extend_high_i8x16(x2), wasm_i16x8_extend_high_i8x16(x3));
    }
    if (d < head_dim) // the last 8
      transpose4(w->keys + (d / 2) * (CHUNK / 4) + b, wasm_i16x8_extend_low_i8x16(wasm_v128_load64_zero(r[0] + d)),
                 wasm_i16x8_extend_low_i8x16(wasm_v128_load64_zero(r[1] + d)),
                 wasm_i16x8_extend_low_i8x16(wasm_v128_load64_zero(r[2] + d)),
                 wasm_i16x8_extend_low_i8x16(wasm_v128_load64_zero(r[3] + d)));
  }
  for (int k = 0; k < CHUNK; k++) w->key_scale[k] = k < n ? *(const float *)(rows + (size_t)k * (head_dim + 4) + head_dim) : 0;
}

/** row[0..n) = float(sums) * key scale * query factor, n of the four lanes (the row has no room past them). */
static inline void store_scores(float *row, v128_t sums, const float *key_scale, float factor, int n) {
  v128_t s = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sums), wasm_v128_load(key_scale)), wasm_f32x4_splat(factor));
  if (n >= 4) {
    wasm_v128_store(row, s);
    return;
  }
  float lanes[4];
  wasm_v128_store(lanes, s);
  for (int i = 0; i < n; i++) row[i] = lanes[i];
}

/**
 * Scores of queries [a0, a1) of the block (from query b0 on) against the widened chunk's n keys at j0:
 * four queries by eight keys at a time. A query scores every key of the chunk, seen or not: softmax reads
 * only the ones it sees.
 */
static void score_chunk_i8(const work_t *w, float *scores, int stride, int b0, int a0, int a1, int j0, int n, int head_dim) {
  enum { ROW = MAX_HEAD_DIM / 2 }; // a query row in int32 pairs
  for (int a = a0; a < a1; a += 4) {
    int m = a1 - a < 4 ? a1 - a : 4;
    const int *q = (const int *)(w->q + (size_t)(a - b0) * MAX_HEAD_DIM);
    for (int b = 0; 4 * b < n; b += 2) {
      v128_t z = wasm_i32x4_splat(0), s00 = z, s01 = z, s10 = z, s11 = z, s20 = z, s21 = z, s30 = z, s31 = z;
      const v128_t *k = w->keys + b;
      for (int p = 0; p < head_dim / 2; p++, k += CHUNK / 4) {
        v128_t k0 = k[0], k1 = k[1], x;
        x = wasm_v128_load32_splat(q + p);
        s00 = wasm_i32x4_add(s00, wasm_i32x4_dot_i16x8(x, k0));
        s01 = wasm_i32x4_add(s01, wasm_i32x4_dot_i16x8(x, k1));
        x = wasm_v128_load32_splat(q + ROW + p);
        s10 = wasm_i32x4_add(s10, wasm_i32x4_dot_i16x8(x, k0));
        s11 = wasm_i32x4_add(s11, wasm_i32x4_dot_i16x8(x, k1));
        x = wasm_v128_load32_splat(q + 2 * ROW + p);
        s20 = wasm_i32x4_add(s20, wasm_i32x4_dot_i16x8(x, k0));
        s21 = wasm_i32x4_add(s21, wasm_i32x4_dot_i16x8(x, k1));
        x = wasm_v128_load32_splat(q + 3 * ROW + p);
        s30 = wasm_i32x4_add(s30, wasm_i32x4_dot_i16x8(x, k0));
        s31 = wasm_i32x4_add(s31, wasm_i32x4_dot_i16x8(x, k1));
      }
      v128_t sums[4][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
      for (int i = 0; i < m; i++)
        for (int h = 0; h < 2; h++) {
          int c = 4 * (b + h);
          if (c < n)
            store_scores(scores + (size_t)(a + i) * stride + j0 + c, sums[i][h], w->key_scale + c, w->q_factor[a + i - b0], n - c);
        }
    }
  }
}

#ifdef RELAXED
/** A query's 8-bit row (int16 lanes) as the relaxed dot product's 7-bit operands: q+ = max(q, 0), q- = q+ - q. */
static void split_query(signed char *pos, signed char *neg, const short *q, int head_dim) {
  for (int d = 0; d < head_dim; d += 16) {
    v128_t hi = d + 8 < head_dim ? wasm_v128_load(q + d + 8) : wasm_i16x8_splat(0); // head_dim is a multiple of 8
    v128_t x = wasm_i8x16_narrow_i16x8(wasm_v128_load(q + d), hi);
    v128_t p = wasm_i8x16_max(x, wasm_i8x16_splat(0));
    wasm_v128_store(pos + d, p);
    wasm_v128_store(neg + d, wasm_i8x16_sub(p, x));
  }
}

/**
 * score_chunk_i8 for a direct block, from the chunk's n key rows where they lie (contiguous): per query, four keys at
 * a time, k . q = k . q+ - k . q- over 16 dims an instruction pair, as exact integers; the same sums, so the same bits.
 */
static void score_direct(const work_t *w, float *scores, int stride, int b0, int a0, int a1, const signed char *rows, int j0,
                         int n, int head_dim) {
  size_t row = (size_t)head_dim + 4;
  for (int c = 0; c < n; c += 4) {
    const signed char *r[4];
    float key_scale[4] __attribute__((aligned(16)));
    for (int i = 0; i < 4; i++) {
      r[i] = c + i < n ? rows + (size_t)(c + i) * row : zero_row;
      key_scale[i] = c + i < n ? *(const float *)(r[i] + head_dim) : 0;
    }
    for (int a = a0; a < a1; a++) {
      const signed char *qp = w->q_pos + (size_t)(a - b0) * MAX_HEAD_DIM, *qn = w->q_neg + (size_t)(a - b0) * MAX_HEAD_DIM;
      v128_t z = wasm_i32x4_splat(0), s[4] = {z, z, z, z};
#ifdef DOT_ADD
      v128_t t[4] = {z, z, z, z};
#endif
      for (int d = 0; d < head_dim; d += 16) {
        v128_t p = wasm_v128_load(qp + d), m = wasm_v128_load(qn + d);
#pragma clang loop unroll(full)
        for (int i = 0; i < 4; i++) {
          // The last 8 dims alone: the row's scale and whatever follows stay unread.
          v128_t k = d + 16 <= head_dim ? wasm_v128_load(r[i] + d) : wasm_v128_load64_zero(r[i] + d);
#ifdef DOT_ADD
          s[i] = rdot(s[i], k, p);
          t[i] = rdot(t[i], k, m);
#else
          // Each pair's k . q+ - k . q- is k . q, within int16 (|k . q| <= 2 * 128 * 127 per pair): the wrapping
          // subtraction gives it exactly.
          s[i] = wasm_i32x4_add(s[i], wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_sub(rdot16(k, p), rdot16(k, m))));
#endif
        }
      }
#ifdef DOT_ADD
      for (int i = 0; i < 4; i++) s[i] = wasm_i32x4_sub(s[i], t[i]);
#endif
      store_scores(scores + (size_t)a * stride + j0 + c, reduce4(s[0], s[1], s[2], s[3]), key_scale, w->q_factor[a - b0], n - c);
    }
  }
}
#endif

/** Value rows of keys [j0, j0 + n) (n <= v, through the block table) widened to int16, key pairs interleaved. */
static void widen_values(work_t *w, const signed char *vpool, const int *table, int j0, int n, int v, int g, int kv_heads,
                         int head_dim, int block_size) {
  const signed char *rows[VCHUNK];
  size_t row = (size_t)head_dim + 4;
  // Row addresses a block at a time: one division per block, not per key.
  for (int k = 0; k < n;) {
    const signed char *r = vpool + row_at(table, j0 + k, g, kv_heads, block_size) * row;
    int run = block_size - (j0 + k) % block_size;
    for (int i = 0; i < run && k < n; i++, k++) rows[k] = r + i * row;
  }
  for (int k = n; k < v; k++) rows[k] = zero_row;
  for (int k = 0; k < v; k++) w->value_scale[k] = k < n ? *(const float *)(rows[k] + head_dim) : 0;
  // Bytes of the two rows interleaved, then sign-extended: [a0, b0, a1, b1, ...] as int16.
  for (int m = 0; m < v / 2; m++) {
    v128_t *v = w->values + (size_t)m * (head_dim / 4);
    const signed char *a = rows[2 * m], *b = rows[2 * m + 1];
    int d = 0;
    for (; d + 16 <= head_dim; d += 16) {
      v128_t x = wasm_v128_load(a + d), y = wasm_v128_load(b + d);
      v128_t lo = wasm_i8x16_shuffle(x, y, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      v128_t hi = wasm_i8x16_shuffle(x, y, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
      v[d / 4] = wasm_i16x8_extend_low_i8x16(lo);
      v[d / 4 + 1] = wasm_i16x8_extend_high_i8x16(lo);
      v[d / 4 + 2] = wasm_i16x8_extend_low_i8x16(hi);
      v[d / 4 + 3] = wasm_i16x8_extend_high_i8x16(hi);
    }
    if (d < head_dim) { // the last 8
      v128_t lo = wasm_i8x16_shuffle(wasm_v128_load64_zero(a + d), wasm_v128_load64_zero(b + d), 0, 16, 1, 17, 2, 18, 3, 19, 4, 20,
                                     5, 21, 6, 22, 7, 23);
      v[d / 4] = wasm_i16x8_extend_low_i8x16(lo);
      v[d / 4 + 1] = wasm_i16x8_extend_high_i8x16(lo);
    }
  }
}

/**
 * 2^x for x <= 0 (a score less its row's max, in log2 units), within 2e-7: x = n + r with n an integer and
 * |r| <= 1/2, 2^r by a degree-5 polynomial (fitted for relative error), 2^n built in the exponent; below
 * -126, 2^-126 times the polynomial's value, so no numerator is 0 (as exp_f32x4's floor keeps none).
 */
static inline v128_t exp2_nonpositive(v128_t x) {
  x = wasm_f32x4_pmax(x, wasm_f32x4_splat(-126.0f));
  v128_t n = wasm_f32x4_nearest(x), r = wasm_f32x4_sub(x, n);
  v128_t p = wasm_f32x4_splat(1.3264658628031611e-3f);
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(9.671495296061039e-3f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(5.550733581185341e-2f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(2.4022242426872253e-1f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(6.931470036506653e-1f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(1.0f));
  v128_t bits = wasm_f32x4_add(n, wasm_f32x4_splat(0x1.8p23f)); // n in the low mantissa bits, exactly
  return wasm_f32x4_mul(p, wasm_i32x4_shl(wasm_i32x4_add(bits, wasm_i32x4_splat(127)), 23));
}

/** Numerators e of keys k..k+3 (0 where `in` is not set) added to the lane sums; x[k..k+4) = e * value scale. */
static inline v128_t weigh4(float *x, v128_t *total, v128_t e, v128_t in, const float *value_scale, int k) {
  e = wasm_v128_and(e, in);
  *total = wasm_f32x4_add(*total, e);
  e = wasm_f32x4_mul(e, wasm_v128_load(value_scale + k));
  wasm_v128_store(x + k, e);
  return e;
}

/** weigh4 of the group of four at k that holds an edge of [lo, seen): only the keys seen are read. */
static inline v128_t weigh_edge(float *x, v128_t *total, const float *p, float max, const float *value_scale, int k, int lo,
                                int seen) {
  float lanes[4] __attribute__((aligned(16)));
  for (int i = 0; i < 4; i++) lanes[i] = k + i >= lo && k + i < seen ? p[k + i] : max;
  v128_t lane = wasm_i32x4_make(k, k + 1, k + 2, k + 3);
  v128_t in = wasm_v128_and(wasm_i32x4_ge(lane, wasm_i32x4_splat(lo)), wasm_i32x4_lt(lane, wasm_i32x4_splat(seen)));
  v128_t e = exp2_nonpositive(wasm_f32x4_sub(wasm_v128_load(lanes), wasm_f32x4_splat(max)));
  return weigh4(x, total, e, in, value_scale, k);
}

/**
 * One query's weights for the chunk. For the keys it sees (lo <= k < seen; the others 0) the numerator
 * e = 2^(p[k] - max), added to the query's lane sums in key order, times the value row's scale; rounded to
 * 16 bits against the largest: round(x * (32767 / top)), the nearest even integer that adding 1.5 * 2^23
 * leaves in the low bits. Returns the weights' scale, top / 32767.
 */
static float chunk_weights(short *wq, v128_t *sum, const float *p, float max, const float *value_scale, int v, int lo,
                           int seen) {
  float x[VCHUNK] __attribute__((aligned(16)));
  v128_t top4 = wasm_f32x4_splat(0), m = wasm_f32x4_splat(max), total = *sum, all = wasm_i32x4_splat(-1);
  // Zeros outside the groups that hold [lo, seen); in them, the group holding lo (and perhaps seen too), the
  // whole groups, then the group holding seen.
  int from = lo < seen ? lo & ~3 : v, to = lo < seen ? (seen + 3) & ~3 : v;
  for (int k = 0; k < from; k += 4) wasm_v128_store(x + k, wasm_f32x4_splat(0));
  for (int k = to; k < v; k += 4) wasm_v128_store(x + k, wasm_f32x4_splat(0));
  int full_lo = (lo + 3) & ~3, full_hi = seen & ~3;
  if ((lo & 3) && lo < seen) top4 = wasm_f32x4_pmax(top4, weigh_edge(x, &total, p, max, value_scale, lo & ~3, lo, seen));
  for (int k = full_lo; k < full_hi; k += 4) {
    v128_t e = exp2_nonpositive(wasm_f32x4_sub(wasm_v128_load(p + k), m));
    top4 = wasm_f32x4_pmax(top4, weigh4(x, &total, e, all, value_scale, k));
  }
  if ((seen & 3) && full_hi >= full_lo)
    top4 = wasm_f32x4_pmax(top4, weigh_edge(x, &total, p, max, value_scale, full_hi, lo, seen));
  *sum = total;
  top4 = wasm_f32x4_pmax(top4, wasm_i32x4_shuffle(top4, top4, 2, 3, 0, 1));
  top4 = wasm_f32x4_pmax(top4, wasm_i32x4_shuffle(top4, top4, 1, 0, 3, 2));
  float top = wasm_f32x4_extract_lane(top4, 0);
  v128_t inv = wasm_f32x4_splat(top > 0 ? 32767.0f / top : 0.0f);
  v128_t magic = wasm_f32x4_splat(0x1.8p23f), bias = wasm_i32x4_splat(0x4B400000);
  for (int k = 0; k < v; k += 8) {
    v128_t lo4 = wasm_i32x4_sub(wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(x + k), inv), magic), bias);
    v128_t hi4 = wasm_i32x4_sub(wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(x + k + 4), inv), magic), bias);
    wasm_v128_store(wq + k, wasm_i16x8_narrow_i32x4(lo4, hi4));
  }
  return top / 32767.0f;
}

/** o[0..4) += float(sums) * factor. */
static inline void add_sums(float *o, v128_t sums, float factor) {
  wasm_v128_store(o, wasm_f32x4_add(wasm_v128_load(o), wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sums), wasm_f32x4_splat(factor))));
}

/**
 * Weighted values of the widened chunk for two neighbouring queries (weights wa and the row after it),
 * dims [d, d + 4 * nb), nb 2 or 4; the second's sums are stored only where ob is not 0.
 */
static inline void add_values_pair(const work_t *w, float *oa, float *ob, const short *wa, float fa, float fb, int v, int d,
                                   int nb, int head_dim) {
  const int *wp = (const int *)wa;
  const v128_t *vals = w->values + d / 4;
  v128_t z = wasm_i32x4_splat(0), a0 = z, a1 = z, a2 = z, a3 = z, b0 = z, b1 = z, b2 = z, b3 = z;
  for (int m = 0; m < v / 2; m++, vals += head_dim / 4) {
    v128_t x = wasm_v128_load32_splat(wp + m), y = wasm_v128_load32_splat(wp + VCHUNK / 2 + m);
    a0 = wasm_i32x4_add(a0, wasm_i32x4_dot_i16x8(x, vals[0]));
    b0 = wasm_i32x4_add(b0, wasm_i32x4_dot_i16x8(y, vals[0]));
    a1 = wasm_i32x4_add(a1, wasm_i32x4_dot_i16x8(x, vals[1]));
    b1 = wasm_i32x4_add(b1, wasm_i32x4_dot_i16x8(y, vals[1]));
    if (nb == 4) {
      a2 = wasm_i32x4_add(a2, wasm_i32x4_dot_i16x8(x, vals[2]));
      b2 = wasm_i32x4_add(b2, wasm_i32x4_dot_i16x8(y, vals[2]));
      a3 = wasm_i32x4_add(a3, wasm_i32x4_dot_i16x8(x, vals[3]));
      b3 = wasm_i32x4_add(b3, wasm_i32x4_dot_i16x8(y, vals[3]));
    }
  }
  v128_t as[4] = {a0, a1, a2, a3}, bs[4] = {b0, b1, b2, b3};
  for (int i = 0; i < nb; i++) {
    add_sums(oa + d + 4 * i, as[i], fa);
    if (ob) add_sums(ob + d + 4 * i, bs[i], fb);
  }
}

/**
 * Weighted values of the widened chunk for Q queries of a small block at once (a decode step's heads of one group),
 * dims [d, d + 8): every query a tile slot of its own, where add_values_pair takes them two by two.
 */
static inline __attribute__((always_inline)) void add_values_few(const int Q, const work_t *w, float *const *o, const short *const *wq,
                                                                 const float *f, int v, int d, int head_dim) {
  const v128_t *vals = w->values + d / 4;
  v128_t z = wasm_i32x4_splat(0), lo[4] = {z, z, z, z}, hi[4] = {z, z, z, z};
  for (int m = 0; m < v / 2; m++, vals += head_dim / 4) {
    v128_t v0 = vals[0], v1 = vals[1];
#pragma clang loop unroll(full)
    for (int i = 0; i < Q; i++) {
      v128_t x = wasm_v128_load32_splat((const int *)wq[i] + m);
      lo[i] = wasm_i32x4_add(lo[i], wasm_i32x4_dot_i16x8(x, v0));
      hi[i] = wasm_i32x4_add(hi[i], wasm_i32x4_dot_i16x8(x, v1));
    }
  }
  for (int i = 0; i < Q; i++) {
    add_sums(o[i] + d, lo[i], f[i]);
    add_sums(o[i] + d + 4, hi[i], f[i]);
  }
}

/**
 * The widened chunk's weighted values (keys up to kn) added to the outputs of queries [a0, b1) of a small block, up to
 * 4 queries a tile. Q is a constant in each call, so the tile unrolls and its accumulators stay in registers.
 */
static void add_values_small(const work_t *w, float *out, int a0, int b0, int b1, int group, int heads, int g, int kn,
                             int head_dim) {
  for (int a = a0; a < b1; a += 4) {
    int nq = b1 - a < 4 ? b1 - a : 4;
    float *o[4];
    const short *wq[4];
    for (int i = 0; i < nq; i++) {
      o[i] = out + query_at(a + i, group, heads, g, head_dim);
      wq[i] = w->w + (size_t)(a + i - b0) * VCHUNK;
    }
    const float *f = w->w_factor + (a - b0);
    for (int d = 0; d < head_dim; d += 8) {
      if (nq == 4) add_values_few(4, w, o, wq, f, kn, d, head_dim);
      else if (nq == 3) add_values_few(3, w, o, wq, f, kn, d, head_dim);
      else if (nq == 2) add_values_few(2, w, o, wq, f, kn, d, head_dim);
      else add_values_few(1, w, o, wq, f, kn, d, head_dim);
    }
  }
}

/** The same for a block of more queries, two at a time. */
static void add_values_block(const work_t *w, float *out, int a0, int b0, int b1, int group, int heads, int g, int kn,
                             int head_dim) {
  for (int a = a0; a < b1; a += 2) {
    // An odd query out pairs with the spare row after it, whose sums are dropped.
    float *oa = out + query_at(a, group, heads, g, head_dim), *ob = a + 1 < b1 ? out + query_at(a + 1, group, heads, g, head_dim) : 0;
    const short *wa = w->w + (size_t)(a - b0) * VCHUNK;
    for (int d = 0; d < head_dim; d += 16)
      add_values_pair(w, oa, ob, wa, w->w_factor[a - b0], w->w_factor[a + 1 - b0], kn, d, head_dim - d < 16 ? 2 : 4, head_dim);
  }
}

void attention_i8(float *out, const float *q, const signed char *kpool, const signed char *vpool, const int *table, int start,
                  int count, int heads, int kv_heads, int head_dim, int block_size, float scale, float *scores, int window) {
  int group = heads / kv_heads, queries = count * group;
  int stride = (start + count + 4) & ~3;
  float scale_log2 = scale * 1.44269504088896341f; // scores in log2 units: the softmax takes 2^x
  int v = vchunk(head_dim);
  work_t w;
  for (int g = 0; g < kv_heads; g++)
    for (int b0 = 0; b0 < queries; b0 += QBLOCK) {
      int b1 = queries - b0 < QBLOCK ? queries : b0 + QBLOCK;
      // The block's keys: up to its last token's, from its first token's window on.
      int end = start + (b1 - 1) / group + 1, first = window_lo(window, start + b0 / group);
      for (int a = b0; a < b1; a++) {
        const float *x = q + query_at(a, group, heads, g, head_dim);
        float s = row_scale_i8(x, head_dim);
        for (int d = 0; d < head_dim; d += 8) wasm_v128_store(w.q + (size_t)(a - b0) * MAX_HEAD_DIM + d, round_row8(x + d, s));
        w.q_factor[a - b0] = s * scale_log2;
      }
      int small = b1 - b0 <= DIRECT_QUERIES;
#ifdef RELAXED
      if (small)
        for (int a = b0; a < b1; a++)
          split_query(w.q_pos + (size_t)(a - b0) * MAX_HEAD_DIM, w.q_neg + (size_t)(a - b0) * MAX_HEAD_DIM,
                      w.q + (size_t)(a - b0) * MAX_HEAD_DIM, head_dim);
#endif
      for (int j0 = first, n; j0 < end; j0 += n) {
        n = chunk_len(j0, end, block_size);
        const signed char *rows = kpool + row_at(table, j0, g, kv_heads, block_size) * (head_dim + 4);
        int a0 = (j0 > start ? j0 - start : 0) * group;
#ifdef RELAXED
        if (small) {
          score_direct(&w, scores, stride, b0, a0 > b0 ? a0 : b0, b1, rows, j0, n, head_dim);
          continue;
        }
#endif
        widen_keys(&w, rows, n, head_dim);
        score_chunk_i8(&w, scores, stride, b0, a0 > b0 ? a0 : b0, b1, j0, n, head_dim);
      }
      for (int a = b0; a < b1; a++) {
        int pos = start + a / group;
        w.max[a - b0] = row_max(scores + (size_t)a * stride, window_lo(window, pos), pos + 1);
        w.sum[a - b0] = wasm_f32x4_splat(0);
        float *o = out + query_at(a, group, heads, g, head_dim);
        for (int d = 0; d < head_dim; d += 4) wasm_v128_store(o + d, wasm_f32x4_splat(0));
      }
      // Values, chunk by chunk of absolute positions, in order.
      for (int j0 = first & ~(v - 1), n; j0 < end; j0 += n) {
        n = end - j0 < v ? end - j0 : v;
        // Keys past the last weigh 0 and add exact zeros: a short chunk (the last) is worked only to n rounded up
        // to 8, not to v. Its weights still round against its own largest, so the bits are the same.
        int kn = (n + 7) & ~7;
        widen_values(&w, vpool, table, j0, n, kn, g, kv_heads, head_dim, block_size);
        int a0 = (j0 > start ? j0 - start : 0) * group;
        if (a0 < b0) a0 = b0;
        for (int a = a0; a < b1; a++) {
          int pos = start + a / group, lo = window_lo(window, pos) - j0;
          w.w_factor[a - b0] = chunk_weights(w.w + (size_t)(a - b0) * VCHUNK, &w.sum[a - b0], scores + (size_t)a * stride + j0,
                                             w.max[a - b0], w.value_scale, kn, lo > 0 ? lo : 0, pos + 1 - j0 < n ? pos + 1 - j0 : n);
        }
        if (small) add_values_small(&w, out, a0, b0, b1, group, heads, g, kn, head_dim);
        else add_values_block(&w, out, a0, b0, b1, group, heads, g, kn, head_dim);
      }
      for (int a = b0; a < b1; a++) {
        v128_t inv = wasm_f32x4_splat(1.0f / hsum(w.sum[a - b0]));
        float *o = out + query_at(a, group, heads, g, head_dim);
        for (int d = 0; d < head_dim; d += 4) wasm_v128_store(o + d, wasm_f32x4_mul(wasm_v128_load(o + d), inv));
      }
    }
}

// Products with block-quantised weights (quant.h): Y (M, N) = X (M, K) @ W^T, X quantised per block of its
// own row (quantize_rows), W read where it lies in any of quant.h's forms.
//
// Tiles: up to 4 rows x 4 columns. A tile decodes each of its 4 columns' blocks once and runs every row of
// the tile against them; per row and block the 4 columns' exact integer dot products are reduced to 4
// totals in one vector, and the block's float step (scale, zero point or min) is done for the 4 columns
// at once. A tail of fewer than 4 columns repeats the last column and stores only the real ones.
#include "quant.h"

#define AI static inline __attribute__((always_inline))

// ---- 32 weights of one column as the dot product takes them -------------------------------------------
#ifdef RELAXED
// Values u in 0..63 as bytes: the i7 operand of relaxed_dot_i8x16_i7x16, exact on any host (V8: int16 lanes; in the
// dot-add build QV8_U8's 0..255, exact under vpdpbusd only).
typedef struct { v128_t v[4]; } wblock;
#else
// Values u as int16, for i32x4.dot_i16x8_s against int16 activations.
typedef struct { v128_t v[4]; } wblock;
#endif

/** Bit i of `bits` (32 bits at p) as byte lane i of two vectors: 0xff where set. */
static inline void bits_to_bytes(const unsigned char *p, v128_t *lo, v128_t *hi) {
  v128_t b = wasm_v128_load32_splat(p);
  const v128_t sel = wasm_i8x16_make(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  v128_t b01 = wasm_i8x16_shuffle(b, b, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  v128_t b23 = wasm_i8x16_shuffle(b, b, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  *lo = wasm_i8x16_eq(wasm_v128_and(b01, sel), sel);
  *hi = wasm_i8x16_eq(wasm_v128_and(b23, sel), sel);
}

/** The V4 forms without high bits: their value plane is interleaved by groups of 4 columns (quant.h). */
#define V4_GROUPED(KIND) ((KIND) == QV4_ZP || (KIND) == QV4_MIN || (KIND) == QV4_KMIN)

/** Group g's block b in an interleaved V4 plane: T_k, 16 bytes at 16 k, = the 4 columns' bytes 4k..4k+3. */
AI const unsigned char *group_block(const qmat *w, size_t g, int blocks, int b) {
  return w->q + (g * (size_t)blocks + b) * 64;
}

/** Column `col`'s 16 bytes of block b as V4 stores them, from wherever the form keeps them. */
AI v128_t column_nibbles(const qmat *w, const int kind, size_t col, int blocks, int b) {
  if (!V4_GROUPED(kind)) return wasm_v128_load(w->q + (col * (size_t)blocks + b) * 16);
  const unsigned char *p = group_block(w, col / 4, blocks, b) + 4 * (col % 4);
  v128_t nib = wasm_v128_load32_zero(p);
  nib = wasm_v128_load32_lane(p + 16, nib, 1);
  nib = wasm_v128_load32_lane(p + 32, nib, 2);
  return wasm_v128_load32_lane(p + 48, nib, 3);
}

/** Elements 0..15 and 16..31 of block b of column `col`, as unsigned bytes (u fits 0..63). */
AI void block_bytes(const qmat *w, const int kind, size_t col, int blocks, int b, v128_t *u0, v128_t *u1) {
  size_t at = col * (size_t)blocks + b;
  v128_t nib = column_nibbles(w, kind, col, blocks, b);
  v128_t mask = wasm_i8x16_splat(0x0f);
  *u0 = wasm_v128_and(nib, mask);
  *u1 = wasm_u8x16_shr(nib, 4);
  if (kind == QV5_ZP || kind == QV5_MIN || kind == QV5_KMIN) {
    v128_t h0, h1;
    bits_to_bytes(w->hi + at * 4, &h0, &h1);
    *u0 = wasm_v128_or(*u0, wasm_v128_and(h0, wasm_i8x16_splat(16)));
    *u1 = wasm_v128_or(*u1, wasm_v128_and(h1, wasm_i8x16_splat(16)));
  } else if (kind == QV6_K16) {
    v128_t h0, h1, g0, g1;
    bits_to_bytes(w->hi + at * 8, &h0, &h1);
    bits_to_bytes(w->hi + at * 8 + 4, &g0, &g1);
    *u0 = wasm_v128_or(*u0, wasm_v128_or(wasm_v128_and(h0, wasm_i8x16_splat(16)), wasm_v128_and(g0, wasm_i8x16_splat(32))));
    *u1 = wasm_v128_or(*u1, wasm_v128_or(wasm_v128_and(h1, wasm_i8x16_splat(16)), wasm_v128_and(g1, wasm_i8x16_splat(32))));
  }
}

/**
 * V8 in the relaxed builds: q as stored (int8) is the i8 operand, against the activation's 7-bit halves
 * a+ = max(a, 0) and a- = a+ - a (|a| <= 127), so no weight is widened; the same integers as QV8_ZP's. With int16
 * pairs, past one row the widened weights serve every row and the int16 path is the faster (docs/kernels.md).
 * The dot-add build does so at one row; past it, it takes u = q + 128 (0..255) itself as the second operand, one
 * fused dot product per 16 values and row instead of two (measured in workerd 1.2-1.45x at 4 and 16 rows; at one
 * row, with the weights from memory, 0.80-0.99x, so not there: docs/kernels.md). Past 127 that operand is
 * implementation-defined, and exact only where V8 lowers the instruction to `vpdpbusd`, which reads it as
 * unsigned. A host runs that build only where its probe reads so (src/engine/runners/wasm/dot-lowering.ts);
 * elsewhere its 8-bit products past one row are wrong, and nothing runs them.
 */
enum { QV8_ONE_ROW = 8, QV8_U8 = 9 };
#if defined(DOT_ADD)
#define TILE_KIND(KIND, R) ((KIND) == QV8_ZP ? ((R) == 1 ? QV8_ONE_ROW : QV8_U8) : (KIND))
#elif defined(RELAXED)
#define TILE_KIND(KIND, R) ((KIND) == QV8_ZP && (R) == 1 ? QV8_ONE_ROW : (KIND))
#else
#define TILE_KIND(KIND, R) (KIND)
#endif

/** A block's values u (elements 0..15 in u0, 16..31 in u1) as this build's dot product takes them. */
AI wblock pack_bytes(v128_t u0, v128_t u1) {
  wblock out;
#ifdef RELAXED
  out.v[0] = u0;
  out.v[1] = u1;
  out.v[2] = out.v[3] = u0;
#else
  out.v[0] = wasm_u16x8_extend_low_u8x16(u0);
  out.v[1] = wasm_u16x8_extend_high_u8x16(u0);
  out.v[2] = wasm_u16x8_extend_low_u8x16(u1);
  out.v[3] = wasm_u16x8_extend_high_u8x16(u1);
#endif
  return out;
}

AI wblock decode(const qmat *w, const int KIND, size_t col, int blocks, int b) {
  wblock out;
  if (KIND == QV8_ONE_ROW) {
    const unsigned char *p = w->q + (col * (size_t)blocks + b) * 32;
    out.v[0] = wasm_v128_load(p);
    out.v[1] = wasm_v128_load(p + 16);
    out.v[2] = out.v[3] = out.v[0];
    return out;
  }
  if (KIND == QV8_U8) {
    const unsigned char *p = w->q + (col * (size_t)blocks + b) * 32;
    return pack_bytes(wasm_v128_xor(wasm_v128_load(p), wasm_i8x16_splat((char)0x80)),
                      wasm_v128_xor(wasm_v128_load(p + 16), wasm_i8x16_splat((char)0x80)));
  }
  if (KIND == QV8_ZP) {
    const unsigned char *p = w->q + (col * (size_t)blocks + b) * 32;
    // u = q + 128 reaches 255: past relaxed SIMD's exact range, so the relaxed builds take V8 as int16 lanes here
    // (the dot-add build, exact only under vpdpbusd, takes QV8_U8 instead).
    v128_t u0 = wasm_v128_xor(wasm_v128_load(p), wasm_i8x16_splat((char)0x80));
    v128_t u1 = wasm_v128_xor(wasm_v128_load(p + 16), wasm_i8x16_splat((char)0x80));
    out.v[0] = wasm_u16x8_extend_low_u8x16(u0);
    out.v[1] = wasm_u16x8_extend_high_u8x16(u0);
    out.v[2] = wasm_u16x8_extend_low_u8x16(u1);
    out.v[3] = wasm_u16x8_extend_high_u8x16(u1);
    return out;
  }
  v128_t u0, u1;
  block_bytes(w, KIND, col, blocks, b, &u0, &u1);
  return pack_bytes(u0, u1);
}

/**
 * The 4 columns of group g's block b of an interleaved V4 plane, as decode() gives them one by one: its four
 * 16-byte rows transposed as 32-bit words (T_k's word c is column c's bytes 4k..4k+3) in 8 shuffles. Only the
 * baseline build's tile() reads them so; the relaxed builds read the groups as they lie (tile_v4).
 */
AI void group_decode(const qmat *w, size_t g, int blocks, int b, wblock *wb) {
  const unsigned char *p = group_block(w, g, blocks, b);
  v128_t t0 = wasm_v128_load(p), t1 = wasm_v128_load(p + 16), t2 = wasm_v128_load(p + 32), t3 = wasm_v128_load(p + 48);
  v128_t lo01 = wasm_i32x4_shuffle(t0, t1, 0, 4, 1, 5), hi01 = wasm_i32x4_shuffle(t0, t1, 2, 6, 3, 7);
  v128_t lo23 = wasm_i32x4_shuffle(t2, t3, 0, 4, 1, 5), hi23 = wasm_i32x4_shuffle(t2, t3, 2, 6, 3, 7);
  v128_t nib[4] = {wasm_i32x4_shuffle(lo01, lo23, 0, 1, 4, 5), wasm_i32x4_shuffle(lo01, lo23, 2, 3, 6, 7),
                   wasm_i32x4_shuffle(hi01, hi23, 0, 1, 4, 5), wasm_i32x4_shuffle(hi01, hi23, 2, 3, 6, 7)};
  v128_t mask = wasm_i8x16_splat(0x0f);
#pragma clang loop unroll(full)
  for (int c = 0; c < 4; c++) wb[c] = pack_bytes(wasm_v128_and(nib[c], mask), wasm_u8x16_shr(nib[c], 4));
}

/** One row's 32 activations of a block, loaded (and for int16 lanes widened) once for the tile's 4 columns. */
typedef struct { v128_t v[4]; } ablock;

AI ablock load_acts(const int KIND, const act_t *x) {
  ablock a;
#ifdef RELAXED
  v128_t a0 = wasm_v128_load(x), a1 = wasm_v128_load(x + 16);
  if (KIND == QV8_ONE_ROW) {
    v128_t z = wasm_i8x16_splat(0);
    a.v[0] = wasm_i8x16_max(a0, z);
    a.v[1] = wasm_i8x16_sub(a.v[0], a0);
    a.v[2] = wasm_i8x16_max(a1, z);
    a.v[3] = wasm_i8x16_sub(a.v[2], a1);
  } else if (KIND == QV8_ZP) {
    a.v[0] = wasm_i16x8_extend_low_i8x16(a0);
    a.v[1] = wasm_i16x8_extend_high_i8x16(a0);
    a.v[2] = wasm_i16x8_extend_low_i8x16(a1);
    a.v[3] = wasm_i16x8_extend_high_i8x16(a1);
  } else {
    a.v[0] = a0;
    a.v[1] = a1;
    a.v[2] = a.v[3] = a0;
  }
#else
  (void)KIND;
  for (int i = 0; i < 4; i++) a.v[i] = wasm_v128_load(x + 8 * i);
#endif
  return a;
}

/**
 * Lane-wise partial sums of u * a over the block's first half (*h0) and second half (*h1), or over the whole
 * block in *h0 when the form needs no halves (*h1 then zero): their lanes add up to the exact integer dot
 * products.
 */
AI void block_dot(const int KIND, const wblock *wb, const ablock *a, v128_t *h0, v128_t *h1) {
  v128_t z = wasm_i32x4_splat(0);
  const int halves = KIND == QV6_K16;
#ifdef RELAXED
#ifdef DOT_ADD
  if (KIND == QV8_ONE_ROW) { // q·a+ - q·a- = q·a over each 4 lanes, in int32
    v128_t pos = rdot(rdot(z, wb->v[0], a->v[0]), wb->v[1], a->v[2]);
    *h0 = wasm_i32x4_sub(pos, rdot(rdot(z, wb->v[0], a->v[1]), wb->v[1], a->v[3]));
    *h1 = z;
    return;
  }
  if (KIND != QV8_ZP) { // QV8_U8 too: u (0..255) against a, read as unsigned by vpdpbusd
    if (halves) {
      *h0 = rdot(z, a->v[0], wb->v[0]);
      *h1 = rdot(z, a->v[1], wb->v[1]);
    } else {
      *h0 = rdot(rdot(z, a->v[0], wb->v[0]), a->v[1], wb->v[1]);
      *h1 = z;
    }
    return;
  }
#else
  if (KIND == QV8_ONE_ROW) {
    // Per lane pair q·a+ - q·a- = q·a, exact in int16 (|q0 a0 + q1 a1| <= 2 * 128 * 127): the wrapping subtraction
    // of two unsaturated pair sums is that value. Widened before the halves are added.
    v128_t d0 = wasm_i16x8_sub(rdot16(wb->v[0], a->v[0]), rdot16(wb->v[0], a->v[1]));
    v128_t d1 = wasm_i16x8_sub(rdot16(wb->v[1], a->v[2]), rdot16(wb->v[1], a->v[3]));
    *h0 = wasm_i32x4_add(wasm_i32x4_extadd_pairwise_i16x8(d0), wasm_i32x4_extadd_pairwise_i16x8(d1));
    *h1 = z;
    return;
  }
  if (KIND != QV8_ZP) {
    // Two halves' pairs added as int16 before one widening: |sum| <= 4 * 63 * 127 = 32004 for u <= 63, exact.
    if (halves) {
      *h0 = wasm_i32x4_extadd_pairwise_i16x8(rdot16(a->v[0], wb->v[0]));
      *h1 = wasm_i32x4_extadd_pairwise_i16x8(rdot16(a->v[1], wb->v[1]));
    } else {
      *h0 = wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_add(rdot16(a->v[0], wb->v[0]), rdot16(a->v[1], wb->v[1])));
      *h1 = z;
    }
    return;
  }
#endif
#endif
  v128_t p0 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wb->v[0], a->v[0]), wasm_i32x4_dot_i16x8(wb->v[1], a->v[1]));
  v128_t p1 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wb->v[2], a->v[2]), wasm_i32x4_dot_i16x8(wb->v[3], a->v[3]));
  if (halves) {
    *h0 = p0;
    *h1 = p1;
  } else {
    *h0 = wasm_i32x4_add(p0, p1);
    *h1 = z;
  }
}

/** Four bytes at p as an i32x4, zero- or sign-extended. */
static inline v128_t u8x4(const unsigned char *p) {
  return wasm_u32x4_extend_low_u16x8(wasm_u16x8_extend_low_u8x16(wasm_v128_load32_zero(p)));
}
static inline v128_t i8x4(const unsigned char *p) {
  return wasm_i32x4_extend_low_i16x8(wasm_i16x8_extend_low_i8x16(wasm_v128_load32_zero(p)));
}

/** A block's side information for the 4 columns of a group, loaded once for every row of the tile. */
typedef struct {
  v128_t s;   // ZP, MIN: scales; K16: d; KMIN: d * sc
  v128_t m;   // MIN: mins; KMIN: dmin * mn
  v128_t zp;  // ZP: zero points (V8's plus 128)
  v128_t sc0; // K16: sub-scales of the halves
  v128_t sc1;
} sideinfo;

AI sideinfo load_side(const qmat *w, const int KIND, size_t g, int blocks, int b) {
  size_t at = (g * (size_t)blocks + b) * 4; // (group, block, column) of the side arrays
  size_t super = (g * (size_t)(blocks / 8) + b / 8) * 4;
  sideinfo si;
  si.m = si.zp = si.sc0 = si.sc1 = wasm_i32x4_splat(0);
  if (KIND == QV6_K16) {
    const unsigned char *p = w->sc + 2 * at; // (column, half) pairs
    si.sc0 = wasm_i32x4_make((signed char)p[0], (signed char)p[2], (signed char)p[4], (signed char)p[6]);
    si.sc1 = wasm_i32x4_make((signed char)p[1], (signed char)p[3], (signed char)p[5], (signed char)p[7]);
    si.s = wasm_v128_load(w->s + super);
  } else if (KIND == QV4_MIN || KIND == QV5_MIN) {
    si.s = wasm_v128_load(w->s + at);
    si.m = wasm_v128_load(w->m + at);
  } else if (KIND == QV4_KMIN || KIND == QV5_KMIN) { // d * sc and dmin * mn: exact products (a half and a 6-bit integer)
    si.s = wasm_f32x4_mul(wasm_v128_load(w->s + super), wasm_f32x4_convert_i32x4(u8x4(w->sc + at)));
    si.m = wasm_f32x4_mul(wasm_v128_load(w->m + super), wasm_f32x4_convert_i32x4(u8x4(w->mn + at)));
  } else if (KIND == QV8_ONE_ROW) { // q itself against the activations: the stored zero point
    si.s = wasm_v128_load(w->s + at);
    si.zp = w->z ? i8x4(w->z + at) : wasm_i32x4_splat(w->zp_const);
  } else { // ZP forms: V8's u carries +128 in its zero point
    si.s = wasm_v128_load(w->s + at);
    const int v8 = KIND == QV8_ZP || KIND == QV8_U8;
    if (w->z) si.zp = v8 ? wasm_i32x4_add(i8x4(w->z + at), wasm_i32x4_splat(128)) : u8x4(w->z + at);
    else si.zp = wasm_i32x4_splat(w->zp_const + (v8 ? 128 : 0));
  }
  return si;
}

/**
 * acc (one row, 4 columns) += what the block adds, from the 4 columns' integer totals over the block (t0;
 * over its halves t0, t1 for K16), the row's activation sums over them (s0, s1) and its scale xs: one float step per element.
 */
AI v128_t block_step(const int KIND, const sideinfo *si, v128_t acc, v128_t t0, v128_t t1, int s0, int s1, float xs) {
  v128_t x = wasm_f32x4_splat(xs);
  if (KIND == QV6_K16) {
    v128_t d0 = wasm_i32x4_sub(t0, wasm_i32x4_splat(32 * s0));
    v128_t d1 = wasm_i32x4_sub(t1, wasm_i32x4_splat(32 * s1));
    v128_t t = wasm_i32x4_add(wasm_i32x4_mul(si->sc0, d0), wasm_i32x4_mul(si->sc1, d1));
    return wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(t), wasm_f32x4_mul(si->s, x)));
  }
  if (KIND == QV4_MIN || KIND == QV5_MIN || KIND == QV4_KMIN || KIND == QV5_KMIN) {
    v128_t t = wasm_f32x4_convert_i32x4(t0);
    v128_t sum = wasm_f32x4_splat((float)(s0 + s1));
    return wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_sub(wasm_f32x4_mul(t, si->s), wasm_f32x4_mul(sum, si->m)), x));
  }
  v128_t t = wasm_i32x4_sub(t0, wasm_i32x4_mul(si->zp, wasm_i32x4_splat(s0 + s1)));
  return wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(t), wasm_f32x4_mul(si->s, x)));
}

/** Row r's 4 outputs of group g, of which only the real columns are stored (a tail group has fewer). */
AI void store_group(float *Y, v128_t acc, size_t r, size_t g, int N) {
  float *y = Y + r * N + g * 4;
  int real = N - (int)(g * 4) < 4 ? N - (int)(g * 4) : 4;
  if (real == 4) wasm_v128_store(y, acc);
  else {
    float lanes[4];
    wasm_v128_store(lanes, acc);
    for (int c = 0; c < real; c++) y[c] = lanes[c];
  }
}

/**
 * Rows [m0, m0 + R) x the 4 columns of group g. xq (M, blocks * 32), xs (M, blocks), xsum (M, blocks, 2).
 * KIND and R are constants where this is inlined, so each (form, tile) is its own straight-line code.
 */
AI void tile(const int FORM, const int R, float *Y, const act_t *xq, const float *xs, const int *xsum, const qmat *w, int m0,
             size_t g, int N, int blocks) {
  const int KIND = TILE_KIND(FORM, R);
  size_t cols[4];
  for (int c = 0; c < 4; c++) cols[c] = g * 4 + c < (size_t)N ? g * 4 + c : (size_t)N - 1;
  v128_t acc[4];
  for (int r = 0; r < R; r++) acc[r] = wasm_f32x4_splat(0);
  for (int b = 0; b < blocks; b++) {
    wblock wb[4];
    // Fully unrolled, so the decoded blocks stay in locals (clang otherwise may keep them on the stack).
    if (V4_GROUPED(KIND)) group_decode(w, g, blocks, b, wb); // the padded plane: a tail's spare columns are zeros
    else {
#pragma clang loop unroll(full)
      for (int c = 0; c < 4; c++) wb[c] = decode(w, KIND, cols[c], blocks, b);
    }
    sideinfo si = load_side(w, KIND, g, blocks, b);
#pragma clang loop unroll(full)
    for (int r = 0; r < R; r++) {
      size_t row = (size_t)(m0 + r) * blocks + b;
      ablock a = load_acts(KIND, xq + row * 32);
      v128_t h0[4], h1[4];
#pragma clang loop unroll(full)
      for (int c = 0; c < 4; c++) block_dot(KIND, &wb[c], &a, &h0[c], &h1[c]);
      // Totals over the whole block (t0), or over its halves (t0, t1) for the form with sub-scales.
      v128_t t0 = reduce4(h0[0], h0[1], h0[2], h0[3]);
      v128_t t1 = KIND == QV6_K16 ? reduce4(h1[0], h1[1], h1[2], h1[3]) : wasm_i32x4_splat(0);
      acc[r] = block_step(KIND, &si, acc[r], t0, t1, xsum[2 * row], xsum[2 * row + 1], xs[row]);
    }
  }
  for (int r = 0; r < R; r++) store_group(Y, acc[r], (size_t)(m0 + r), g, N);
}

#ifdef WIDE_ROWS
/** Groups of 4 columns a single row's tile spans in the builds for workerd (tile_row). */
enum { ROW_GROUPS = 4 };

/**
 * One row x the 16 columns of groups g .. g + ROW_GROUPS - 1 (the last may be a tail): the row's activations, block
 * sums and scale are loaded once for all of them, not once per 4 columns. workerd runs V8 without its trap handler, so
 * every load carries a bounds check (docs/kernels.md, "Inside workerd"): measured there, 8 columns run 4-bit
 * products at one row 1.08-1.14x tile()'s 4, and 16 another 1.03x (the 8-bit output projection 1.06x, then
 * 1.09x). Node 20's V8 runs the 8-column form at 0.76x of decode (it spills), so only the builds the worker alone
 * runs (-DWIDE_ROWS: relaxed-wide and dot-add) have it. Each column's operations are tile()'s: the same bits. The
 * 4-bit forms, interleaved since, keep 4 columns at one row too (matmul_v4_grouped).
 */
AI void tile_row(const int FORM, float *Y, const act_t *xq, const float *xs, const int *xsum, const qmat *w,
                 int m0, size_t g, int N, int blocks) {
  const int KIND = TILE_KIND(FORM, 1);
  size_t cols[16];
  for (int c = 0; c < 4 * ROW_GROUPS; c++) cols[c] = g * 4 + c < (size_t)N ? g * 4 + c : (size_t)N - 1;
  v128_t acc[4];
  for (int h = 0; h < ROW_GROUPS; h++) acc[h] = wasm_f32x4_splat(0);
  for (int b = 0; b < blocks; b++) {
    size_t row = (size_t)m0 * blocks + b;
    ablock a = load_acts(KIND, xq + row * 32);
    int s0 = xsum[2 * row], s1 = xsum[2 * row + 1];
    float x = xs[row];
#pragma clang loop unroll(full)
    for (int h = 0; h < ROW_GROUPS; h++) {
      wblock wb[4];
#pragma clang loop unroll(full)
      for (int c = 0; c < 4; c++) wb[c] = decode(w, KIND, cols[4 * h + c], blocks, b);
      sideinfo si = load_side(w, KIND, g + h, blocks, b);
      v128_t h0[4], h1[4];
#pragma clang loop unroll(full)
      for (int c = 0; c < 4; c++) block_dot(KIND, &wb[c], &a, &h0[c], &h1[c]);
      v128_t t0 = reduce4(h0[0], h0[1], h0[2], h0[3]);
      v128_t t1 = KIND == QV6_K16 ? reduce4(h1[0], h1[1], h1[2], h1[3]) : wasm_i32x4_splat(0);
      acc[h] = block_step(KIND, &si, acc[h], t0, t1, s0, s1, x);
    }
  }
  for (int h = 0; h < ROW_GROUPS; h++) store_group(Y, acc[h], (size_t)m0, g + h, N);
}
#endif

#ifdef RELAXED
/** One row's block of activations as 8 splats: v[k] = a[4k..4k+3] in every lane (k < 4), v[4 + k] = a[16 + 4k..]. */
typedef struct { v128_t v[8]; } splats;

/**
 * By 2 loads and 8 shuffles: for the 4-column tiles, which take a row's splats once per group; in workerd, where
 * every load is bounds-checked, 1.08-1.17x the 8 loads at 4 and 16 rows with the weights in cache (dot-add build).
 */
AI splats shuffle_splats(const act_t *x) {
  splats a;
  v128_t a0 = wasm_v128_load(x), a1 = wasm_v128_load(x + 16);
  a.v[0] = wasm_i32x4_shuffle(a0, a0, 0, 0, 0, 0);
  a.v[1] = wasm_i32x4_shuffle(a0, a0, 1, 1, 1, 1);
  a.v[2] = wasm_i32x4_shuffle(a0, a0, 2, 2, 2, 2);
  a.v[3] = wasm_i32x4_shuffle(a0, a0, 3, 3, 3, 3);
  a.v[4] = wasm_i32x4_shuffle(a1, a1, 0, 0, 0, 0);
  a.v[5] = wasm_i32x4_shuffle(a1, a1, 1, 1, 1, 1);
  a.v[6] = wasm_i32x4_shuffle(a1, a1, 2, 2, 2, 2);
  a.v[7] = wasm_i32x4_shuffle(a1, a1, 3, 3, 3, 3);
  return a;
}

/**
 * The exact integer totals of an interleaved V4 group's 4 columns over one block against a row's splats, lane c
 * = column c: T_k's low nibbles are elements 4k..4k+3 of each column and its high ones 16 + 4k.., so every dot
 * product's lanes are already the columns' partial sums and no reduction across lanes is needed (reduce4).
 */
AI v128_t group_dot(const unsigned char *p, const splats *a) {
  const v128_t mask = wasm_i8x16_splat(0x0f);
#ifdef DOT_ADD
  // Two chains, so the dot products do not wait on one another's sums.
  v128_t c0 = wasm_i32x4_splat(0), c1 = wasm_i32x4_splat(0);
#pragma clang loop unroll(full)
  for (int k = 0; k < 4; k++) {
    v128_t t = wasm_v128_load(p + 16 * k);
    c0 = rdot(c0, a->v[k], wasm_v128_and(t, mask));
    c1 = rdot(c1, a->v[4 + k], wasm_u8x16_shr(t, 4));
  }
  return wasm_i32x4_add(c0, c1);
#else
  // Each lane pair is one column's; all 8 added as int16: |sum| <= 16 * 15 * 127 = 30480 for u <= 15, exact.
  v128_t d[8];
#pragma clang loop unroll(full)
  for (int k = 0; k < 4; k++) {
    v128_t t = wasm_v128_load(p + 16 * k);
    d[k] = rdot16(a->v[k], wasm_v128_and(t, mask));
    d[4 + k] = rdot16(a->v[4 + k], wasm_u8x16_shr(t, 4));
  }
  v128_t e0 = wasm_i16x8_add(wasm_i16x8_add(d[0], d[4]), wasm_i16x8_add(d[1], d[5]));
  v128_t e1 = wasm_i16x8_add(wasm_i16x8_add(d[2], d[6]), wasm_i16x8_add(d[3], d[7]));
  return wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_add(e0, e1));
#endif
}

/** Rows [m0, m0 + R) x group g of an interleaved V4 form: tile()'s float steps on group_dot's totals. */
AI void tile_v4(const int KIND, const int R, float *Y, const act_t *xq, const float *xs, const int *xsum, const qmat *w,
                int m0, size_t g, int N, int blocks) {
  v128_t acc[4];
  for (int r = 0; r < R; r++) acc[r] = wasm_f32x4_splat(0);
  for (int b = 0; b < blocks; b++) {
    const unsigned char *p = group_block(w, g, blocks, b);
    sideinfo si = load_side(w, KIND, g, blocks, b);
#pragma clang loop unroll(full)
    for (int r = 0; r < R; r++) {
      size_t row = (size_t)(m0 + r) * blocks + b;
      splats a = shuffle_splats(xq + row * 32);
      acc[r] = block_step(KIND, &si, acc[r], group_dot(p, &a), wasm_i32x4_splat(0), xsum[2 * row], xsum[2 * row + 1], xs[row]);
    }
  }
  for (int r = 0; r < R; r++) store_group(Y, acc[r], (size_t)(m0 + r), g, N);
}

#endif

/**
 * The row loop every form shares: 4-row tiles, then 2, then single rows, each single row first through WIDE (the
 * wide builds' 16-column tile, or nothing). A macro, not a function taking the tiles, so each form's code is what it
 * was when measured.
 */
#define ROW_TILES(TILE, WIDE)                                                                    \
  size_t groups = ((size_t)N + 3) / 4;                                                           \
  int m = 0;                                                                                     \
  for (; m + 4 <= M; m += 4)                                                                     \
    for (size_t g = 0; g < groups; g++) TILE(KIND, 4, Y, xq, xs, xsum, w, m, g, N, blocks);      \
  for (; m + 2 <= M; m += 2)                                                                     \
    for (size_t g = 0; g < groups; g++) TILE(KIND, 2, Y, xq, xs, xsum, w, m, g, N, blocks);      \
  for (; m < M; m++) {                                                                           \
    size_t g = 0;                                                                                \
    WIDE                                                                                         \
    for (; g < groups; g++) TILE(KIND, 1, Y, xq, xs, xsum, w, m, g, N, blocks);                  \
  }
#ifdef WIDE_ROWS
#define WIDE_ROW_GROUPS(TILE_ROW) \
  for (; g + ROW_GROUPS <= groups; g += ROW_GROUPS) TILE_ROW(KIND, Y, xq, xs, xsum, w, m, g, N, blocks);
#else
#define WIDE_ROW_GROUPS(TILE_ROW)
#endif

#ifdef RELAXED
/**
 * matmul_kind for the interleaved V4 forms in the relaxed builds: the same row loop on their own tiles, 4 columns
 * wide at one row too. A group's blocks are one sequential stream; the 16-column tile read 4 of them and, with the
 * weights coming from memory as in decode, ran at 0.88-0.98x the 4-column tile in workerd (docs/kernels.md).
 */
AI void matmul_v4_grouped(const int KIND, float *Y, const act_t *xq, const float *xs, const int *xsum, const qmat *w, int M,
                          int blocks, int N) {
  ROW_TILES(tile_v4, )
}
#endif

AI void matmul_kind(const int KIND, float *Y, const act_t *xq, const float *xs, const int *xsum, const qmat *w, int M, int blocks, int N) {
#ifdef RELAXED
  if (V4_GROUPED(KIND)) {
    matmul_v4_grouped(KIND, Y, xq, xs, xsum, w, M, blocks, N);
    return;
  }
#endif
  ROW_TILES(tile, WIDE_ROW_GROUPS(tile_row))
}

#define KIND_KERNEL(KIND, name) \
  static __attribute__((noinline)) void name(float *Y, const act_t *xq, const float *xs, const int *xsum, const qmat *w, int M, int blocks, int N) { \
    matmul_kind(KIND, Y, xq, xs, xsum, w, M, blocks, N); \
  }
KIND_KERNEL(QV4_ZP, matmul_v4_zp)
KIND_KERNEL(QV4_MIN, matmul_v4_min)
KIND_KERNEL(QV4_KMIN, matmul_v4_kmin)
KIND_KERNEL(QV5_ZP, matmul_v5_zp)
KIND_KERNEL(QV5_MIN, matmul_v5_min)
KIND_KERNEL(QV5_KMIN, matmul_v5_kmin)
KIND_KERNEL(QV6_K16, matmul_v6_k16)
KIND_KERNEL(QV8_ZP, matmul_v8_zp)
#ifdef DOT_ADD
/**
 * matmul_v8_zp for a single row (M = 1: the tiles past one row drop out), compiled by V8 apart from them. Inside
 * matmul_v8_zp beside the u8 tiles, the same one-row source measured 0.83-0.92x in workerd; on its own 1.04-1.06x
 * what it ran beside the int16 tiles (docs/kernels.md). Batch-1 decode's output projection is this call.
 */
static __attribute__((noinline)) void matmul_v8_zp_row(float *Y, const act_t *xq, const float *xs, const int *xsum,
                                                       const qmat *w, int blocks, int N) {
  matmul_kind(QV8_ZP, Y, xq, xs, xsum, w, 1, blocks, N);
}
#endif

/** Y (M, N) = X (M, K) @ W^T for a quantised W; K = blocks * 32 (the activations are padded, as W is). */
void EXPORT(matmul_q)(float *Y, const act_t *xq, const float *xs, const int *xsum, const qmat *w, int M, int blocks, int N) {
  switch (w->kind) {
    case QV4_ZP: matmul_v4_zp(Y, xq, xs, xsum, w, M, blocks, N); break;
    case QV4_MIN: matmul_v4_min(Y, xq, xs, xsum, w, M, blocks, N); break;
    case QV4_KMIN: matmul_v4_kmin(Y, xq, xs, xsum, w, M, blocks, N); break;
    case QV5_ZP: matmul_v5_zp(Y, xq, xs, xsum, w, M, blocks, N); break;
    case QV5_MIN: matmul_v5_min(Y, xq, xs, xsum, w, M, blocks, N); break;
    case QV5_KMIN: matmul_v5_kmin(Y, xq, xs, xsum, w, M, blocks, N); break;
    case QV6_K16: matmul_v6_k16(Y, xq, xs, xsum, w, M, blocks, N); break;
    default:
#ifdef DOT_ADD
      if (M == 1) {
        matmul_v8_zp_row(Y, xq, xs, xsum, w, blocks, N);
        break;
      }
#endif
      matmul_v8_zp(Y, xq, xs, xsum, w, M, blocks, N);
  }
}

/** out (K) = column `col` of W (its embedding row), dequantised: the same per-element values the products use. */
void EXPORT(dequantize_column)(float *out, const qmat *w, int col, int blocks) {
  size_t g = (size_t)col / 4;
  int lane = col % 4;
  for (int b = 0; b < blocks; b++) {
    unsigned char u[32];
    if (w->kind == QV8_ZP) {
      const unsigned char *p = w->q + ((size_t)col * blocks + b) * 32;
      for (int i = 0; i < 32; i++) u[i] = p[i] ^ 0x80;
    } else {
      v128_t u0, u1;
      block_bytes(w, w->kind, (size_t)col, blocks, b, &u0, &u1);
      wasm_v128_store(u, u0);
      wasm_v128_store(u + 16, u1);
    }
    size_t at = (g * (size_t)blocks + b) * 4 + lane;
    size_t super = (g * (size_t)(blocks / 8) + b / 8) * 4 + lane;
    for (int i = 0; i < 32; i++) {
      float v;
      switch (w->kind) {
        case QV6_K16:
          v = w->s[super] * (float)((signed char)w->sc[2 * at + i / 16] * ((int)u[i] - 32));
          break;
        case QV4_MIN:
        case QV5_MIN:
          v = w->s[at] * (float)u[i] - w->m[at];
          break;
        case QV4_KMIN:
        case QV5_KMIN:
          v = w->s[super] * (float)w->sc[at] * (float)u[i] - w->m[super] * (float)w->mn[at];
          break;
        default: {
          int zp = w->z ? (w->kind == QV8_ZP ? (signed char)w->z[at] + 128 : w->z[at]) : w->zp_const + (w->kind == QV8_ZP ? 128 : 0);
          v = w->s[at] * (float)((int)u[i] - zp);
        }
      }
      out[b * 32 + i] = v;
    }
  }
}

/**
 * The exact integer dot product of 16 activations (int8, |a| <= 127) and 16 values in 0..15, by this
 * build's instructions: hosts check it before trusting a relaxed build (Node 20's baseline compiler
 * computes relaxed_dot_i8x16_i7x16 wrongly). Given values past 127 it tells how V8 lowered the
 * instruction (dot-lowering.ts).
 */
int EXPORT(probe_dot)(const signed char *a, const unsigned char *u) {
#if defined(DOT_ADD)
  v128_t s = rdot(wasm_i32x4_splat(0), wasm_v128_load(a), wasm_v128_load(u));
#elif defined(RELAXED)
  v128_t s = wasm_i32x4_extadd_pairwise_i16x8(rdot16(wasm_v128_load(a), wasm_v128_load(u)));
#else
  v128_t av = wasm_v128_load(a), uv = wasm_v128_load(u);
  v128_t s = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(av), wasm_u16x8_extend_low_u8x16(uv)),
                            wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(av), wasm_u16x8_extend_high_u8x16(uv)));
#endif
  return wasm_i32x4_extract_lane(s, 0) + wasm_i32x4_extract_lane(s, 1) + wasm_i32x4_extract_lane(s, 2) + wasm_i32x4_extract_lane(s, 3);
}

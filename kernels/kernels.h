// Shared declarations of the edge kernels: WebAssembly SIMD (simd128) only, no libc.
//
// Batch invariance is the rule every kernel keeps: an output element is computed by the same sequence of
// float32 operations whatever the batch size, tile or position in the batch. Tiles only decide which
// elements are computed together, never the order of the operations that produce one element; lane-wise
// SIMD float ops are IEEE single ops, so a lane computes exactly what the scalar op would.
#pragma once
#include <wasm_simd128.h>

typedef unsigned long size_t;
typedef unsigned short half;

#define EXPORT(name) __attribute__((export_name(#name))) name

typedef signed char i8x16 __attribute__((vector_size(16)));
typedef int i32x4 __attribute__((vector_size(16)));

/** [sum(v0), sum(v1), sum(v2), sum(v3)]: integer, so exact in any order. */
static inline v128_t reduce4(v128_t v0, v128_t v1, v128_t v2, v128_t v3) {
  v128_t s01 = wasm_i32x4_add(wasm_i32x4_shuffle(v0, v1, 0, 4, 1, 5), wasm_i32x4_shuffle(v0, v1, 2, 6, 3, 7));
  v128_t s23 = wasm_i32x4_add(wasm_i32x4_shuffle(v2, v3, 0, 4, 1, 5), wasm_i32x4_shuffle(v2, v3, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(s01, s23, 0, 1, 4, 5), wasm_i32x4_shuffle(s01, s23, 2, 3, 6, 7));
}

#ifdef RELAXED
#ifndef DOT_ADD
/** Pairs of products u * a as int16 lanes (x64: one pmaddubsw): exact for u in 0..127 and a int8 (no pair reaches 2^15). */
static inline v128_t rdot16(v128_t a, v128_t u) {
  return (v128_t)__builtin_wasm_relaxed_dot_i8x16_i7x16_s_i16x8((i8x16)a, (i8x16)u);
}
#else
/**
 * acc + the sums of each 4 products u * a as int32 lanes: one instruction (vpdpbusd) where V8 lowers it with
 * AVX-VNNI, as workerd's does on a host that has it; without, five, and the relaxed build's int16 pairs are
 * faster (the worker picks this build only where its V8 fuses: src/engine/runners/wasm/dot-lowering.ts).
 * Exact for u in 0..127 and a int8, and under vpdpbusd for u in 0..255 (QV8_U8 in matmul_quant.c relies on that).
 */
static inline v128_t rdot(v128_t acc, v128_t a, v128_t u) {
  return (v128_t)__builtin_wasm_relaxed_dot_i8x16_i7x16_add_s_i32x4((i8x16)a, (i8x16)u, (i32x4)acc);
}
#endif
#endif

/** (l0 + l1) + (l2 + l3): one fixed order for every horizontal sum. */
static inline float hsum(v128_t v) {
  return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
         (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

/** e^x per lane, within ~1 ulp for x in [-87, 88] (Cephes expf: Cody-Waite reduction, degree-6 polynomial). */
static inline v128_t exp_f32x4(v128_t x) {
  // pmin / pmax are one x86 instruction each (min / max are several); with x first, a NaN passes through as before.
  x = wasm_f32x4_pmin(wasm_f32x4_pmax(x, wasm_f32x4_splat(-87.3f)), wasm_f32x4_splat(88.7f));
  v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(x, wasm_f32x4_splat(1.44269504088896341f)));
  v128_t r = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(0.693359375f)));
  r = wasm_f32x4_sub(r, wasm_f32x4_mul(n, wasm_f32x4_splat(-2.12194440e-4f)));
  v128_t p = wasm_f32x4_splat(1.9875691500e-4f);
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(1.3981999507e-3f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(8.3334519073e-3f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(4.1665795894e-2f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(1.6666665459e-1f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(5.0000001201e-1f));
  p = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_mul(p, r), r), r), wasm_f32x4_splat(1.0f));
  // 2^n built in the exponent field; n is in [-126, 128) after the clamp. Adding 1.5 * 2^23 puts the integer n
  // in the low mantissa bits exactly (cheaper than trunc_sat, which x86 spells in several instructions).
  v128_t bits = wasm_f32x4_add(n, wasm_f32x4_splat(0x1.8p23f));
  v128_t pow2n = wasm_i32x4_shl(wasm_i32x4_add(bits, wasm_i32x4_splat(127)), 23);
  return wasm_f32x4_mul(p, pow2n);
}

/** Eight halves (IEEE binary16) to two float32x4: exact for normal and subnormal values. */
static inline void half8_to_f32(v128_t h, v128_t *lo, v128_t *hi) {
  v128_t parts[2] = {wasm_u32x4_extend_low_u16x8(h), wasm_u32x4_extend_high_u16x8(h)};
  for (int i = 0; i < 2; i++) {
    v128_t sign = wasm_i32x4_shl(wasm_v128_and(parts[i], wasm_i32x4_splat(0x8000)), 16);
    v128_t mag = wasm_i32x4_shl(wasm_v128_and(parts[i], wasm_i32x4_splat(0x7fff)), 13);
    // The half's exponent sits in float's field with bias 15 instead of 127: scaling by 2^112 fixes it,
    // and turns a half subnormal (float subnormal here) into the right normal float.
    v128_t value = wasm_f32x4_mul(mag, wasm_f32x4_splat(0x1p112f));
    parts[i] = wasm_v128_or(value, sign);
  }
  *lo = parts[0];
  *hi = parts[1];
}

static inline float half_to_f32(half h) {
  v128_t lo, hi;
  half8_to_f32(wasm_i16x8_splat((short)h), &lo, &hi);
  return wasm_f32x4_extract_lane(lo, 0);
}

/**
 * max |x[i]| over n (a multiple of 4): lanes, then across them (the scale of a symmetric 8-bit block). Magnitudes
 * order as their bits do, read as int32 (a NaN's lie above infinity's, so a NaN still wins): one x86 instruction
 * per max, where f32x4.max takes several.
 */
static inline float abs_max(const float *x, int n) {
  v128_t m = wasm_i32x4_splat(0);
  for (int i = 0; i < n; i += 4) m = wasm_i32x4_max(m, wasm_f32x4_abs(wasm_v128_load(x + i)));
  m = wasm_i32x4_max(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));
  m = wasm_i32x4_max(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
  return wasm_f32x4_extract_lane(m, 0);
}

/**
 * v rounded to the nearest integer (ties to even) as int32 lanes, v first clamped to [-127, 127] (a NaN gives 0):
 * an 8-bit value. trunc_sat(nearest(v))'s integers for every |v| <= 127, in fewer x86 instructions than V8 spends on
 * those two: adding 1.5 * 2^23 rounds to an integer and leaves it in the low mantissa bits.
 */
static inline v128_t round_i8_lanes(v128_t v) {
  v = wasm_f32x4_pmin(wasm_f32x4_pmax(v, wasm_f32x4_splat(-127.0f)), wasm_f32x4_splat(127.0f));
  v = wasm_v128_and(v, wasm_f32x4_eq(v, v));
  const v128_t magic = wasm_f32x4_splat(0x1.8p23f);
  return wasm_i32x4_sub(wasm_f32x4_add(v, magic), magic);
}

/** x . w over n (a multiple of 4): four lanes, then hsum; one fixed order (attention scores, products). */
static inline float dot_f32(const float *x, const float *w, int n) {
  v128_t a = wasm_f32x4_splat(0);
  for (int d = 0; d < n; d += 4) a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(x + d), wasm_v128_load(w + d)));
  return hsum(a);
}

/** x . w over n (a multiple of 8), w float16 widened in registers; the same order as dot_f32. */
static inline float dot_f16(const float *x, const half *w, int n) {
  v128_t a = wasm_f32x4_splat(0);
  for (int d = 0; d < n; d += 8) {
    v128_t lo, hi;
    half8_to_f32(wasm_v128_load(w + d), &lo, &hi);
    a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(x + d), lo));
    a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(x + d + 4), hi));
  }
  return hsum(a);
}

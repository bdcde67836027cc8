// Block-quantised weights as the kernels read them, and the activations they multiply.
//
// Every quantised matrix is blocks of 32 along its input dimension K, one output column n after another,
// each value an unsigned integer u in 0..(2^bits - 1); what a block is worth is its value plane and its
// side information (one of the forms below), both laid out at load time by src/engine/runners/wasm/ from
// whatever the file held (our exports, onnxruntime's MatMulNBits / MatMulInteger, ggml's blocks):
//
//   value planes, (N, K/32, bytes per block), column n contiguous:
//     V4  16 B   byte j: low nibble = element j, high nibble = element j + 16 (ggml's order); with no high bits
//                (V4 forms) interleaved by groups of 4 columns instead: (ceil(N/4), K/32, 64 B), the group's
//                block as 4 rows T_k of 16 B, T_k = bytes 4k..4k+3 of each of its 4 columns (a tail's spare
//                columns zero), so (T_k & 15) holds elements 4k..4k+3 of the 4 columns side by side
//                (ggml's 4x4 repacking); written column by column, then interleaved once (interleave_v4)
//     V5  V4 + hi (N, K/32, 4): bit i = element i's fifth bit
//     V6  V4 + hi (N, K/32, 8): bytes 0..3 element i's fifth bit, bytes 4..7 its sixth
//     V8  32 B   byte i = element i as int8; u = q + 128
//   side forms, per block, columns in groups of four: (ceil(N/4), K/32, 4), a group zero-padded:
//     ZP    w = s * (u - z): s f32, z u8 per block (or one constant for the matrix)
//     MIN   w = s * u - m: s, m f32 (ggml's Q4_1 / Q5_1)
//     KMIN  w = d * sc * u - dmin * mn: sc, mn u8 per block, d, dmin f32 per 8 blocks (Q4_K, Q5_K)
//     K16   w = d * sc_h * (u - 32): two i8 sub-scales per block (16 values each), d per 8 blocks (Q6_K)
//
// Activations are quantised per block of 32 of their own row (never across rows): a = round(x / xs),
// |a| <= 127, with xs f32 per block and the exact integer sums of each half block (asum, for the zero
// points and mins). Per block and column the integer dot product sum(u * a) is exact whatever the
// instructions (dot_i16x8 on baseline SIMD, relaxed_dot_i8x16_i7x16 where the host has it: u is in 0..127
// there, so it is deterministic; except V8's u, 0..255, past one row in the dot-add build, exact under
// vpdpbusd, the only lowering that build runs under: matmul_quant.c, QV8_U8), and is reduced to one integer
// before any float operation. So every output element gets the same float operations in the same order (one
// per block, block order) on both paths, in any tile and any batch: every build gives the same bits where it
// runs, and a row's bits do not depend on its neighbours.
#pragma once
#include "kernels.h"

enum { QV4_ZP = 0, QV4_MIN = 1, QV4_KMIN = 2, QV5_ZP = 3, QV5_MIN = 4, QV5_KMIN = 5, QV6_K16 = 6, QV8_ZP = 7 };

/** A quantised matrix (N, K) in linear memory; JS writes this header next to it (writeQmat in src/engine/runners/wasm/weights/matrix.ts). */
typedef struct {
  int kind;
  int zp_const;            // ZP forms: the zero point when z is null
  const unsigned char *q;  // value plane
  const unsigned char *hi; // V5 / V6 high bits
  const float *s;          // ZP, MIN: s; KMIN, K16: d
  const float *m;          // MIN: m; KMIN: dmin
  const unsigned char *z;  // ZP: per-block zero points, or null
  const unsigned char *sc; // KMIN: sc; K16: sc_lo, sc_hi interleaved (as int8)
  const unsigned char *mn; // KMIN: mn
} qmat;

#ifdef RELAXED
typedef signed char act_t;
#else
typedef short act_t;
#endif

// Load-time repacking into quant.h's layouts, lossless: each source block's values and scales land in the
// value planes and side arrays the products read. Called as the weights stream in, a run of whole columns
// at a time (`col0` is the first column of the run, `cols` how many): the column-grouped side arrays are
// indexed by the absolute column, so a run may start anywhere.
#include "quant.h"

static inline float h2f(const unsigned char *p) { return half_to_f32((half)(p[0] | p[1] << 8)); }

/** Side-array index of (column, block): (column group, block, lane). */
static inline size_t side(size_t col, int blocks, int b) { return ((col / 4) * (size_t)blocks + b) * 4 + col % 4; }
/** The same for per-superblock arrays (8 blocks of 32). */
static inline size_t super_side(size_t col, int blocks, int b) { return ((col / 4) * (size_t)(blocks / 8) + b / 8) * 4 + col % 4; }

/** 32 values u[0..32) (each < 16 after masking) into a V4 block: byte i = u[i] | u[i + 16] << 4. */
static inline void put_v4(unsigned char *dst, const unsigned char *u) {
  for (int i = 0; i < 16; i++) dst[i] = (unsigned char)((u[i] & 15) | (u[i + 16] & 15) << 4);
}

/** Bit `bit` of each of u[0..32) into 4 bytes: bit i of the result = that bit of u[i]. */
static inline void put_bits(unsigned char *dst, const unsigned char *u, int bit) {
  for (int j = 0; j < 4; j++) {
    unsigned char v = 0;
    for (int i = 0; i < 8; i++) v |= (unsigned char)(((u[8 * j + i] >> bit) & 1) << i);
    dst[j] = v;
  }
}

/**
 * onnxruntime's MatMulNBits 4-bit block of 32 (byte j: element 2j low, 2j + 1 high) into V4, in place;
 * `n` blocks.
 */
void EXPORT(repack_ort_q4)(unsigned char *q, int n) {
  unsigned char u[32];
  for (int b = 0; b < n; b++, q += 16) {
    for (int j = 0; j < 16; j++) {
      u[2 * j] = q[j] & 15;
      u[2 * j + 1] = q[j] >> 4;
    }
    put_v4(q, u);
  }
}

/** uint8 with an offset of 128 (our exports, MatMulNBits 8-bit) to int8, in place: q ^ 0x80. */
void EXPORT(flip_sign)(unsigned char *q, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) wasm_v128_store(q + i, wasm_v128_xor(wasm_v128_load(q + i), wasm_i8x16_splat((char)0x80)));
  for (; i < n; i++) q[i] ^= 0x80;
}

/**
 * ggml blocks of a run of columns into the planes. `src` holds `cols` columns of `blocks` blocks of 32
 * (for K-quants, blocks / 8 superblocks of 256), back to back as in the file.
 *   Q8_0: d, qs[32] int8           -> V8  q, s
 *   Q4_0: d, qs[16]                -> V4  q, s (zero point 8)
 *   Q4_1: d, m, qs[16]             -> V4  q, s, m = -m (w = s u - m)
 *   Q5_0: d, qh[4], qs[16]         -> V5  q, hi, s (zero point 16)
 *   Q5_1: d, m, qh[4], qs[16]      -> V5  q, hi, s, m = -m
 *   Q4_K: d, dmin, scales[12], qs[128]          -> V4 q, d, dmin, sc, mn
 *   Q5_K: d, dmin, scales[12], qh[32], qs[128]  -> V5 q, hi, d, dmin, sc, mn
 *   Q6_K: ql[128], qh[64], scales[16], d        -> V6 q, hi, d, sc (pairs)
 */
enum { G_Q4_0 = 2, G_Q4_1 = 3, G_Q5_0 = 6, G_Q5_1 = 7, G_Q8_0 = 8, G_Q4_K = 12, G_Q5_K = 13, G_Q6_K = 14 };

/** ggml's 6-bit scale and min of sub-block j (get_scale_min_k4). */
static inline void scale_min_k4(int j, const unsigned char *q, unsigned char *sc, unsigned char *mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void EXPORT(repack_ggml)(int type, const unsigned char *src, int col0, int cols, int blocks, const qmat *w) {
  unsigned char u[256];
  unsigned char *q = (unsigned char *)w->q, *hi = (unsigned char *)w->hi, *sc = (unsigned char *)w->sc, *mn = (unsigned char *)w->mn;
  float *s = (float *)w->s, *m = (float *)w->m;
  for (int c = 0; c < cols; c++) {
    size_t col = (size_t)col0 + c;
    if (type == G_Q8_0 || type == G_Q4_0 || type == G_Q4_1 || type == G_Q5_0 || type == G_Q5_1) {
      for (int b = 0; b < blocks; b++) {
        size_t at = col * blocks + b, k = side(col, blocks, b);
        s[k] = h2f(src);
        if (type == G_Q8_0) {
          for (int i = 0; i < 32; i++) q[at * 32 + i] = src[2 + i];
          src += 34;
          continue;
        }
        int off = 2;
        if (type == G_Q4_1 || type == G_Q5_1) {
          m[k] = -h2f(src + 2);
          off = 4;
        }
        unsigned qh = 0;
        if (type == G_Q5_0 || type == G_Q5_1) {
          qh = src[off] | src[off + 1] << 8 | src[off + 2] << 16 | (unsigned)src[off + 3] << 24;
          off += 4;
        }
        for (int i = 0; i < 16; i++) {
          u[i] = (unsigned char)((src[off + i] & 15) | ((qh >> i) & 1) << 4);
          u[i + 16] = (unsigned char)((src[off + i] >> 4) | ((qh >> (i + 16)) & 1) << 4);
        }
        put_v4(q + at * 16, u);
        if (hi) put_bits(hi + at * 4, u, 4);
        src += off + 16;
      }
      continue;
    }
    for (int sb = 0; sb < blocks / 8; sb++) {
      const unsigned char *x = src;
      if (type == G_Q6_K) {
        const unsigned char *ql = x, *qh = x + 128;
        const signed char *scales = (const signed char *)(x + 192);
        for (int h = 0; h < 2; h++)
          for (int l = 0; l < 32; l++) {
            int a = ql[64 * h + l], b2 = ql[64 * h + l + 32], hb = qh[32 * h + l];
            u[128 * h + l] = (unsigned char)((a & 15) | (hb & 3) << 4);
            u[128 * h + l + 32] = (unsigned char)((b2 & 15) | ((hb >> 2) & 3) << 4);
            u[128 * h + l + 64] = (unsigned char)((a >> 4) | ((hb >> 4) & 3) << 4);
            u[128 * h + l + 96] = (unsigned char)((b2 >> 4) | ((hb >> 6) & 3) << 4);
          }
        s[super_side(col, blocks, sb * 8)] = h2f(x + 208);
        for (int j = 0; j < 8; j++) {
          size_t b = (size_t)sb * 8 + j, at = col * blocks + b, k = side(col, blocks, (int)b);
          put_v4(q + at * 16, u + 32 * j);
          put_bits(hi + at * 8, u + 32 * j, 4);
          put_bits(hi + at * 8 + 4, u + 32 * j, 5);
          sc[2 * k] = (unsigned char)scales[2 * j];
          sc[2 * k + 1] = (unsigned char)scales[2 * j + 1];
        }
        src += 210;
        continue;
      }
      // Q4_K and Q5_K: 4 chunks of 64; chunk c's low nibbles are sub-block 2c, its high nibbles 2c + 1.
      const unsigned char *scales = x + 4, *qh = x + 16, *qs = type == G_Q5_K ? x + 48 : x + 16;
      for (int c2 = 0; c2 < 4; c2++)
        for (int l = 0; l < 32; l++) {
          int v = qs[32 * c2 + l];
          int h0 = type == G_Q5_K ? (qh[l] >> (2 * c2)) & 1 : 0, h1 = type == G_Q5_K ? (qh[l] >> (2 * c2 + 1)) & 1 : 0;
          u[64 * c2 + l] = (unsigned char)((v & 15) | h0 << 4);
          u[64 * c2 + 32 + l] = (unsigned char)((v >> 4) | h1 << 4);
        }
      size_t ks = super_side(col, blocks, sb * 8);
      s[ks] = h2f(x);
      m[ks] = h2f(x + 2);
      for (int j = 0; j < 8; j++) {
        size_t b = (size_t)sb * 8 + j, at = col * blocks + b, k = side(col, blocks, (int)b);
        put_v4(q + at * 16, u + 32 * j);
        if (type == G_Q5_K) put_bits(hi + at * 4, u + 32 * j, 4);
        scale_min_k4(j, scales, sc + k, mn + k);
      }
      src += type == G_Q5_K ? 176 : 144;
    }
  }
}

/**
 * A V4 plane as written, (N, blocks, 16) with column n contiguous, into the form the products read (quant.h),
 * in place: each group of 4 columns' blocks become 4 rows T_k of 16 bytes, T_k = the 4 columns' bytes 4k..4k+3.
 * A group's columns lie together either way, so it goes through `tmp` (blocks * 64 bytes) a group at a time.
 * The plane holds whole groups; a tail group's spare columns are zeroed.
 */
void EXPORT(interleave_v4)(unsigned char *q, int n, int blocks, unsigned char *tmp) {
  size_t column = (size_t)blocks * 16;
  for (int g = 0; 4 * g < n; g++) {
    unsigned char *p = q + (size_t)g * 4 * column;
    for (int c = 0; c < 4; c++)
      for (size_t i = 0; i < column; i++) tmp[c * column + i] = 4 * g + c < n ? p[c * column + i] : 0;
    for (int b = 0; b < blocks; b++)
      for (int k = 0; k < 4; k++)
        for (int c = 0; c < 4; c++)
          for (int j = 0; j < 4; j++) p[((size_t)b * 4 + k) * 16 + 4 * c + j] = tmp[c * column + (size_t)b * 16 + 4 * k + j];
  }
}

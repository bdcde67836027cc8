// Float matrix products. Weights come in the two layouts our ONNX exports store:
//   kn: W (K, N), MatMul's [in, out]: y[n] = sum_k x[k] * W[k, n], computed as rows of W scaled by
//       x[k] and added up (axpy form), 4 lanes of n at a time.
//   nk: W (N, K), the tied embedding used as the output projection (Gemm transB): y[n] = dot(x, W[n]).
// Every output element is accumulated in the same order whatever the tile (see kernels.h): kn adds
// k = 0, 1, ... one product at a time; nk keeps four lanes over k, then hsum, then the scalar tail.
// A tile of rows shares each weight vector it loads, so a batch streams the weights once.
#include "kernels.h"

// kn, float32: tiles of 4 rows x 8 columns (8 accumulators), then 1 row x 16 columns for single rows
// and remainders, then 4 and 1 columns.
static inline void kn_f32_4x8(float *Y, const float *X, const float *W, int K, int N, int n) {
  v128_t a00 = wasm_f32x4_splat(0), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
  for (int k = 0; k < K; k++) {
    v128_t w0 = wasm_v128_load(W + (size_t)k * N + n), w1 = wasm_v128_load(W + (size_t)k * N + n + 4);
    v128_t x0 = wasm_f32x4_splat(X[k]), x1 = wasm_f32x4_splat(X[K + k]), x2 = wasm_f32x4_splat(X[2 * K + k]), x3 = wasm_f32x4_splat(X[3 * K + k]);
    a00 = wasm_f32x4_add(a00, wasm_f32x4_mul(x0, w0)); a01 = wasm_f32x4_add(a01, wasm_f32x4_mul(x0, w1));
    a10 = wasm_f32x4_add(a10, wasm_f32x4_mul(x1, w0)); a11 = wasm_f32x4_add(a11, wasm_f32x4_mul(x1, w1));
    a20 = wasm_f32x4_add(a20, wasm_f32x4_mul(x2, w0)); a21 = wasm_f32x4_add(a21, wasm_f32x4_mul(x2, w1));
    a30 = wasm_f32x4_add(a30, wasm_f32x4_mul(x3, w0)); a31 = wasm_f32x4_add(a31, wasm_f32x4_mul(x3, w1));
  }
  wasm_v128_store(Y + n, a00); wasm_v128_store(Y + n + 4, a01);
  wasm_v128_store(Y + N + n, a10); wasm_v128_store(Y + N + n + 4, a11);
  wasm_v128_store(Y + 2 * N + n, a20); wasm_v128_store(Y + 2 * N + n + 4, a21);
  wasm_v128_store(Y + 3 * N + n, a30); wasm_v128_store(Y + 3 * N + n + 4, a31);
}

// One row, 32 columns: eight independent accumulators, and 128 contiguous bytes of each weight row.
static inline void kn_f32_1x32(float *Y, const float *X, const float *W, int K, int N, int n) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int k = 0; k < K; k++) {
    const float *w = W + (size_t)k * N + n;
    v128_t x = wasm_f32x4_splat(X[k]);
    a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(x, wasm_v128_load(w)));
    a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(x, wasm_v128_load(w + 4)));
    a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(x, wasm_v128_load(w + 8)));
    a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(x, wasm_v128_load(w + 12)));
    a4 = wasm_f32x4_add(a4, wasm_f32x4_mul(x, wasm_v128_load(w + 16)));
    a5 = wasm_f32x4_add(a5, wasm_f32x4_mul(x, wasm_v128_load(w + 20)));
    a6 = wasm_f32x4_add(a6, wasm_f32x4_mul(x, wasm_v128_load(w + 24)));
    a7 = wasm_f32x4_add(a7, wasm_f32x4_mul(x, wasm_v128_load(w + 28)));
  }
  wasm_v128_store(Y + n, a0); wasm_v128_store(Y + n + 4, a1); wasm_v128_store(Y + n + 8, a2); wasm_v128_store(Y + n + 12, a3);
  wasm_v128_store(Y + n + 16, a4); wasm_v128_store(Y + n + 20, a5); wasm_v128_store(Y + n + 24, a6); wasm_v128_store(Y + n + 28, a7);
}

/**
 * One row, streaming W in file order: y (N, a multiple of 4) += x[k] * W[k] for k = 0, 1, ..., four rows of
 * W per pass over y. The sum for each element is the tiles' own (acc + x_k w_k, k ascending), but W is
 * read front to back, which is what a bandwidth-bound single row needs.
 */
static void kn_f32_row_stream(float *y, const float *x, const float *W, int K, int N) {
  for (int n = 0; n < N; n += 4) wasm_v128_store(y + n, wasm_f32x4_splat(0));
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    const float *w = W + (size_t)k * N;
    v128_t x0 = wasm_f32x4_splat(x[k]), x1 = wasm_f32x4_splat(x[k + 1]), x2 = wasm_f32x4_splat(x[k + 2]), x3 = wasm_f32x4_splat(x[k + 3]);
    v128_t x4 = wasm_f32x4_splat(x[k + 4]), x5 = wasm_f32x4_splat(x[k + 5]), x6 = wasm_f32x4_splat(x[k + 6]), x7 = wasm_f32x4_splat(x[k + 7]);
    for (int n = 0; n < N; n += 4) {
      const float *c = w + n;
      v128_t a = wasm_v128_load(y + n);
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x0, wasm_v128_load(c)));
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x1, wasm_v128_load(c + N)));
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x2, wasm_v128_load(c + 2 * N)));
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x3, wasm_v128_load(c + 3 * N)));
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x4, wasm_v128_load(c + 4 * N)));
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x5, wasm_v128_load(c + 5 * N)));
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x6, wasm_v128_load(c + 6 * N)));
      a = wasm_f32x4_add(a, wasm_f32x4_mul(x7, wasm_v128_load(c + 7 * N)));
      wasm_v128_store(y + n, a);
    }
  }
  for (; k < K; k++) {
    v128_t xk = wasm_f32x4_splat(x[k]);
    for (int n = 0; n < N; n += 4) wasm_v128_store(y + n, wasm_f32x4_add(wasm_v128_load(y + n), wasm_f32x4_mul(xk, wasm_v128_load(W + (size_t)k * N + n))));
  }
}

/** Y (M, N) = X (M, K) @ W (K, N), float32 weights. */
void EXPORT(matmul_kn_f32)(float *Y, const float *X, const float *W, int M, int K, int N) {
  int n = 0;
  if (M == 1 && N % 4 == 0) { // measured: 1.1x the 1x32 tiles for one row, 0.75x for two (W read twice)
    kn_f32_row_stream(Y, X, W, K, N);
    return;
  }
  for (; n + 32 <= N && M < 4; n += 32)
    for (int m = 0; m < M; m++) kn_f32_1x32(Y + (size_t)m * N, X + (size_t)m * K, W, K, N, n);
  for (; n + 8 <= N; n += 8) {
    int m = 0;
    for (; m + 4 <= M; m += 4) kn_f32_4x8(Y + (size_t)m * N, X + (size_t)m * K, W, K, N, n);
    for (; m < M; m++) {
      v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
      for (int k = 0; k < K; k++) {
        v128_t x = wasm_f32x4_splat(X[(size_t)m * K + k]);
        a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(x, wasm_v128_load(W + (size_t)k * N + n)));
        a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(x, wasm_v128_load(W + (size_t)k * N + n + 4)));
      }
      wasm_v128_store(Y + (size_t)m * N + n, a0);
      wasm_v128_store(Y + (size_t)m * N + n + 4, a1);
    }
  }
  for (; n < N; n++)
    for (int m = 0; m < M; m++) {
      float a = 0;
      for (int k = 0; k < K; k++) a += X[(size_t)m * K + k] * W[(size_t)k * N + n];
      Y[(size_t)m * N + n] = a;
    }
}

// kn, float16 weights: the same tiles, each weight vector widened to float32 as it is loaded.
/** Y (M, N) = X (M, K) @ W (K, N), float16 weights. */
void EXPORT(matmul_kn_f16)(float *Y, const float *X, const half *W, int M, int K, int N) {
  int n = 0;
  for (; n + 8 <= N; n += 8) {
    int m = 0;
    for (; m + 4 <= M; m += 4) {
      v128_t a00 = wasm_f32x4_splat(0), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
      const float *x = X + (size_t)m * K;
      for (int k = 0; k < K; k++) {
        v128_t w0, w1;
        half8_to_f32(wasm_v128_load(W + (size_t)k * N + n), &w0, &w1);
        v128_t x0 = wasm_f32x4_splat(x[k]), x1 = wasm_f32x4_splat(x[K + k]), x2 = wasm_f32x4_splat(x[2 * K + k]), x3 = wasm_f32x4_splat(x[3 * K + k]);
        a00 = wasm_f32x4_add(a00, wasm_f32x4_mul(x0, w0)); a01 = wasm_f32x4_add(a01, wasm_f32x4_mul(x0, w1));
        a10 = wasm_f32x4_add(a10, wasm_f32x4_mul(x1, w0)); a11 = wasm_f32x4_add(a11, wasm_f32x4_mul(x1, w1));
        a20 = wasm_f32x4_add(a20, wasm_f32x4_mul(x2, w0)); a21 = wasm_f32x4_add(a21, wasm_f32x4_mul(x2, w1));
        a30 = wasm_f32x4_add(a30, wasm_f32x4_mul(x3, w0)); a31 = wasm_f32x4_add(a31, wasm_f32x4_mul(x3, w1));
      }
      float *y = Y + (size_t)m * N + n;
      wasm_v128_store(y, a00); wasm_v128_store(y + 4, a01);
      wasm_v128_store(y + N, a10); wasm_v128_store(y + N + 4, a11);
      wasm_v128_store(y + 2 * N, a20); wasm_v128_store(y + 2 * N + 4, a21);
      wasm_v128_store(y + 3 * N, a30); wasm_v128_store(y + 3 * N + 4, a31);
    }
    for (; m < M; m++) {
      v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
      for (int k = 0; k < K; k++) {
        v128_t w0, w1;
        half8_to_f32(wasm_v128_load(W + (size_t)k * N + n), &w0, &w1);
        v128_t x = wasm_f32x4_splat(X[(size_t)m * K + k]);
        a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(x, w0));
        a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(x, w1));
      }
      wasm_v128_store(Y + (size_t)m * N + n, a0);
      wasm_v128_store(Y + (size_t)m * N + n + 4, a1);
    }
  }
  for (; n < N; n++)
    for (int m = 0; m < M; m++) {
      float a = 0;
      for (int k = 0; k < K; k++) a += X[(size_t)m * K + k] * half_to_f32(W[(size_t)k * N + n]);
      Y[(size_t)m * N + n] = a;
    }
}

// nk: one output is a dot product of two contiguous rows. Lanes over k in steps of 4, hsum, tail.
static inline float dot_tail(const float *x, const float *w, int k0, int K, float s) {
  for (int k = k0; k < K; k++) s += x[k] * w[k];
  return s;
}

/** One row, eight columns: eight independent accumulators over eight contiguous weight rows. */
static void nk_f32_1x8(float *y, const float *x, const float *W, int K, int K4) {
  const float *w0 = W, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K, *w4 = w3 + K, *w5 = w4 + K, *w6 = w5 + K, *w7 = w6 + K;
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int k = 0; k < K4; k += 4) {
    v128_t u = wasm_v128_load(x + k);
    a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(u, wasm_v128_load(w0 + k)));
    a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(u, wasm_v128_load(w1 + k)));
    a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(u, wasm_v128_load(w2 + k)));
    a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(u, wasm_v128_load(w3 + k)));
    a4 = wasm_f32x4_add(a4, wasm_f32x4_mul(u, wasm_v128_load(w4 + k)));
    a5 = wasm_f32x4_add(a5, wasm_f32x4_mul(u, wasm_v128_load(w5 + k)));
    a6 = wasm_f32x4_add(a6, wasm_f32x4_mul(u, wasm_v128_load(w6 + k)));
    a7 = wasm_f32x4_add(a7, wasm_f32x4_mul(u, wasm_v128_load(w7 + k)));
  }
  y[0] = dot_tail(x, w0, K4, K, hsum(a0)); y[1] = dot_tail(x, w1, K4, K, hsum(a1));
  y[2] = dot_tail(x, w2, K4, K, hsum(a2)); y[3] = dot_tail(x, w3, K4, K, hsum(a3));
  y[4] = dot_tail(x, w4, K4, K, hsum(a4)); y[5] = dot_tail(x, w5, K4, K, hsum(a5));
  y[6] = dot_tail(x, w6, K4, K, hsum(a6)); y[7] = dot_tail(x, w7, K4, K, hsum(a7));
}

/** Y (M, N) = X (M, K) @ W (N, K)^T, float32 weights: one row 8 columns at a time, else 2 rows x 4 columns. */
void EXPORT(matmul_nk_f32)(float *Y, const float *X, const float *W, int M, int K, int N) {
  int K4 = K & ~3;
  if (M == 1) { // the tiles' sums, element by element; eight weight rows streamed at once
    int n = 0;
    for (; n + 8 <= N; n += 8) nk_f32_1x8(Y + n, X, W + (size_t)n * K, K, K4);
    for (; n < N; n++) {
      v128_t a = wasm_f32x4_splat(0);
      for (int k = 0; k < K4; k += 4) a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(X + k), wasm_v128_load(W + (size_t)n * K + k)));
      Y[n] = dot_tail(X, W + (size_t)n * K, K4, K, hsum(a));
    }
    return;
  }
  for (int n = 0; n < N; n += 4) {
    int cols = N - n < 4 ? N - n : 4;
    int m = 0;
    for (; m + 2 <= M && cols == 4; m += 2) {
      const float *x0 = X + (size_t)m * K, *x1 = x0 + K;
      const float *w0 = W + (size_t)n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
      v128_t a00 = wasm_f32x4_splat(0), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
      for (int k = 0; k < K4; k += 4) {
        v128_t u0 = wasm_v128_load(x0 + k), u1 = wasm_v128_load(x1 + k);
        v128_t v0 = wasm_v128_load(w0 + k), v1 = wasm_v128_load(w1 + k), v2 = wasm_v128_load(w2 + k), v3 = wasm_v128_load(w3 + k);
        a00 = wasm_f32x4_add(a00, wasm_f32x4_mul(u0, v0)); a01 = wasm_f32x4_add(a01, wasm_f32x4_mul(u0, v1));
        a02 = wasm_f32x4_add(a02, wasm_f32x4_mul(u0, v2)); a03 = wasm_f32x4_add(a03, wasm_f32x4_mul(u0, v3));
        a10 = wasm_f32x4_add(a10, wasm_f32x4_mul(u1, v0)); a11 = wasm_f32x4_add(a11, wasm_f32x4_mul(u1, v1));
        a12 = wasm_f32x4_add(a12, wasm_f32x4_mul(u1, v2)); a13 = wasm_f32x4_add(a13, wasm_f32x4_mul(u1, v3));
      }
      float *y0 = Y + (size_t)m * N + n, *y1 = y0 + N;
      y0[0] = dot_tail(x0, w0, K4, K, hsum(a00)); y0[1] = dot_tail(x0, w1, K4, K, hsum(a01));
      y0[2] = dot_tail(x0, w2, K4, K, hsum(a02)); y0[3] = dot_tail(x0, w3, K4, K, hsum(a03));
      y1[0] = dot_tail(x1, w0, K4, K, hsum(a10)); y1[1] = dot_tail(x1, w1, K4, K, hsum(a11));
      y1[2] = dot_tail(x1, w2, K4, K, hsum(a12)); y1[3] = dot_tail(x1, w3, K4, K, hsum(a13));
    }
    for (; m < M; m++) {
      const float *x = X + (size_t)m * K;
      for (int c = 0; c < cols; c++) {
        const float *w = W + (size_t)(n + c) * K;
        v128_t a = wasm_f32x4_splat(0);
        for (int k = 0; k < K4; k += 4) a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(x + k), wasm_v128_load(w + k)));
        Y[(size_t)m * N + n + c] = dot_tail(x, w, K4, K, hsum(a));
      }
    }
  }
}

/** Y (M, N) = X (M, K) @ W (N, K)^T, float16 weights (the tied output projection of fp16 exports). */
void EXPORT(matmul_nk_f16)(float *Y, const float *X, const half *W, int M, int K, int N) {
  int K8 = K & ~7;
  for (int n = 0; n < N; n++) {
    const half *w = W + (size_t)n * K;
    for (int m = 0; m < M; m++) {
      const float *x = X + (size_t)m * K;
      float s = dot_f16(x, w, K8);
      for (int k = K8; k < K; k++) s += x[k] * half_to_f32(w[k]);
      Y[(size_t)m * N + n] = s;
    }
  }
}

/** Y (M, N) = X (M, K) @ W (N, K)^T, bfloat16 weights (GGUF BF16 files): each weight widened exactly. */
void EXPORT(matmul_nk_bf16)(float *Y, const float *X, const unsigned short *W, int M, int K, int N) {
  int K8 = K & ~7;
  for (int n = 0; n < N; n++) {
    const unsigned short *w = W + (size_t)n * K;
    for (int m = 0; m < M; m++) {
      const float *x = X + (size_t)m * K;
      v128_t a = wasm_f32x4_splat(0);
      for (int k = 0; k < K8; k += 8) {
        v128_t h = wasm_v128_load(w + k);
        v128_t lo = wasm_i32x4_shl(wasm_u32x4_extend_low_u16x8(h), 16), hi = wasm_i32x4_shl(wasm_u32x4_extend_high_u16x8(h), 16);
        a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(x + k), lo));
        a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(x + k + 4), hi));
      }
      float s = hsum(a);
      for (int k = K8; k < K; k++) {
        union { unsigned u; float f; } v = {(unsigned)w[k] << 16};
        s += x[k] * v.f;
      }
      Y[(size_t)m * N + n] = s;
    }
  }
}

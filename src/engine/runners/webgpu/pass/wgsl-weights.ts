/**
 * WGSL that reads one element of a weight matrix in the form it was uploaded in (gpu-weights.ts): dense
 * float32 / float16 / bfloat16 in either layout, or one of the kernels' block-quantised forms (kernels/quant.h),
 * dequantised here, element by element, to the very value kernels/matmul_quant.c's dequantize_column gives.
 * Every buffer is array<u32> (float16 and bytes unpacked by hand: no shader-f16 needed).
 */

/** Matrix kinds in `Mat.kind`: dense ones, then 16 + the quantised format's index in QUANT_FORMATS. */
export const DENSE_KINDS = { 'f32-nk': 0, 'f16-nk': 1, 'bf16-nk': 2, 'f32-kn': 3, 'f16-kn': 4 } as const;
export const QUANT_KIND_BASE = 16;

/** Words of the `Mat` struct (a uniform's prefix: kind, K, N, blocks, zp, then plane offsets in words). */
export const MAT_WORDS = 12;

export const WEIGHT_WGSL = /* wgsl */ `
struct Mat {
  kind: u32, K: u32, N: u32, blocks: u32,
  zp: i32, q: u32, hi: u32, s: u32,
  m: u32, z: u32, sc: u32, mn: u32,
}
const NO_PLANE: u32 = 0xffffffffu;

fn wbyte(base: u32, i: u32) -> u32 {
  return (W[base + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
}
fn sbyte(b: u32) -> i32 {
  return (i32(b) << 24u) >> 24u;
}
fn half_at(base: u32, i: u32) -> f32 {
  let word = W[base + (i >> 1u)];
  return unpack2x16float(word)[i & 1u];
}
fn bf16_at(base: u32, i: u32) -> f32 {
  let word = W[base + (i >> 1u)];
  return bitcast<f32>(((word >> ((i & 1u) * 16u)) & 0xffffu) << 16u);
}

/** Element (n, k) of a dense matrix. */
fn wdense(M: Mat, n: u32, k: u32) -> f32 {
  switch M.kind {
    case 0u: { return bitcast<f32>(W[M.q + n * M.K + k]); }
    case 1u: { return half_at(M.q, n * M.K + k); }
    case 2u: { return bf16_at(M.q, n * M.K + k); }
    case 3u: { return bitcast<f32>(W[M.q + k * M.N + n]); }
    default: { return half_at(M.q, k * M.N + n); }
  }
}

/** Element i of block b of column n of a quantised matrix (kernels/quant.h's forms). */
fn wquant(M: Mat, n: u32, b: u32, i: u32) -> f32 {
  let form = M.kind - ${QUANT_KIND_BASE}u;
  let cell = n * M.blocks + b;
  let at = ((n >> 2u) * M.blocks + b) * 4u + (n & 3u);
  let sup = ((n >> 2u) * (M.blocks >> 3u) + (b >> 3u)) * 4u + (n & 3u);
  if (form == 7u) {
    let q = sbyte(wbyte(M.q, cell * 32u + i));
    var zp = M.zp;
    if (M.z != NO_PLANE) { zp = sbyte(wbyte(M.z, at)); }
    return bitcast<f32>(W[M.s + at]) * f32(q - zp);
  }
  // The 4-bit forms without high bits (0..2) keep a group of 4 columns' blocks interleaved: byte j of column n
  // at 16 (j / 4) + 4 (n % 4) + j % 4 of the group's 64 (kernels/quant.h).
  let j = i & 15u;
  var byteAt = cell * 16u + j;
  if (form < 3u) { byteAt = ((n >> 2u) * M.blocks + b) * 64u + (j >> 2u) * 16u + (n & 3u) * 4u + (j & 3u); }
  let nib = wbyte(M.q, byteAt);
  var u = select(nib & 15u, nib >> 4u, i >= 16u);
  if (form == 3u || form == 4u || form == 5u) {
    u = u | (((W[M.hi + cell] >> i) & 1u) << 4u);
  } else if (form == 6u) {
    u = u | (((W[M.hi + 2u * cell] >> i) & 1u) << 4u) | (((W[M.hi + 2u * cell + 1u] >> i) & 1u) << 5u);
  }
  switch form {
    case 1u, 4u: { return bitcast<f32>(W[M.s + at]) * f32(u) - bitcast<f32>(W[M.m + at]); }
    case 2u, 5u: {
      return bitcast<f32>(W[M.s + sup]) * f32(wbyte(M.sc, at)) * f32(u) - bitcast<f32>(W[M.m + sup]) * f32(wbyte(M.mn, at));
    }
    case 6u: { return bitcast<f32>(W[M.s + sup]) * f32(sbyte(wbyte(M.sc, 2u * at + (i >> 4u))) * (i32(u) - 32)); }
    default: {
      var zp = M.zp;
      if (M.z != NO_PLANE) { zp = i32(wbyte(M.z, at)); }
      return bitcast<f32>(W[M.s + at]) * f32(i32(u) - zp);
    }
  }
}

/** Element (n, k) of any matrix. */
fn wat(M: Mat, n: u32, k: u32) -> f32 {
  if (M.kind < ${QUANT_KIND_BASE}u) { return wdense(M, n, k); }
  return wquant(M, n, k >> 5u, k & 31u);
}
`;

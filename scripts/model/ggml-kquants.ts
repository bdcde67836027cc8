// ggml's K-quants as its reference quantizers write them (ggml-quants.c: quantize_row_q4_K_ref,
// quantize_row_q5_K_ref, quantize_row_q6_K_ref with their helpers make_qkx2_quants and make_qx_quants),
// which is what llama-quantize writes when it has no importance matrix. Super-blocks of 256 values along a
// row. Each float operation is rounded to float32 where C rounds it (Math.fround), in C's order, with no
// fused multiply-add: the searches below compare errors, so a different rounding can pick other scales.
import { halfBits, halfValue } from '../../src/engine/model/half.js';

const QK_K = 256;
const f = Math.fround;
/** ggml's GROUP_MAX_EPS: a group with no larger magnitude is all zeros. */
const GROUP_MAX_EPS = f(1e-15);

/** ggml's nearest_int: round half to even via the float32 add of 1.5·2^23 (valid for |x| < 2^22). */
function nearestInt(x: number): number {
  return f(x + 12582912) - 12582912;
}

const clamp = (v: number, lo: number, hi: number): number => Math.max(lo, Math.min(hi, v));

/**
 * Fits x ≈ scale·L - min over one sub-block with L in 0..nmax, weighted: first from the range, then over
 * nstep+1 trial inverse scales (rmin + rdelta·is + nmax)/(max - min), each refined by weighted least
 * squares for scale and min; keeps the fit of least weighted squared error. Writes L; returns
 * [scale, min] (min as the positive amount subtracted).
 */
function makeQkx2Quants(
  x: Float32Array,
  weights: Float32Array,
  nmax: number,
  L: Uint8Array,
  rmin: number,
  rdelta: number,
  nstep: number,
): [number, number] {
  const n = x.length;
  let min = x[0];
  let max = x[0];
  let sumW = weights[0];
  let sumX = f(sumW * x[0]);
  for (let i = 1; i < n; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sumW = f(sumW + weights[i]);
    sumX = f(sumX + f(weights[i] * x[i]));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0);
    return [0, -min];
  }
  let iscale = f(nmax / f(max - min));
  let scale = f(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    L[i] = clamp(nearestInt(f(iscale * f(x[i] - min))), 0, nmax);
    const diff = f(f(f(scale * L[i]) + min) - x[i]);
    bestError = f(bestError + f(weights[i] * f(diff * diff)));
  }
  const Laux = new Uint8Array(n);
  for (let is = 0; is <= nstep; is++) {
    // min moves to each better fit, so later trials scale from it.
    iscale = f(f(f(rmin + f(f(rdelta) * is)) + nmax) / f(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(f(iscale * f(x[i] - min))), 0, nmax);
      Laux[i] = l;
      const wl = f(weights[i] * l);
      sumL = f(sumL + wl);
      sumL2 = f(sumL2 + f(wl * l));
      sumXL = f(sumXL + f(wl * x[i]));
    }
    const D = f(f(sumW * sumL2) - f(sumL * sumL));
    if (D > 0) {
      let thisScale = f(f(f(sumW * sumXL) - f(sumX * sumL)) / D);
      let thisMin = f(f(f(sumL2 * sumX) - f(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = f(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        const diff = f(f(f(thisScale * Laux[i]) + thisMin) - x[i]);
        curError = f(curError + f(weights[i] * f(diff * diff)));
      }
      if (curError < bestError) {
        L.set(Laux);
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  return [scale, -min];
}

/**
 * Fits x ≈ scale·(L - nmax) with L in 0..2·nmax-1, weights x² (rmse_type 1): the value of largest magnitude
 * maps to -nmax, then 18 nearby inverse scales are tried and the best least-squares fit kept. Writes L
 * (offset by nmax); returns the scale (negative when the largest magnitude is positive).
 */
function makeQxQuants(x: Float32Array, nmax: number, L: Uint8Array): number {
  const n = x.length;
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    L.fill(0);
    return 0;
  }
  const sums = (iscale: number): [number, number] => {
    let sumlx = 0;
    let suml2 = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(f(iscale * x[i])), -nmax, nmax - 1);
      const w = f(x[i] * x[i]);
      sumlx = f(sumlx + f(f(w * x[i]) * l));
      suml2 = f(suml2 + f(f(w * l) * l));
    }
    return [sumlx, suml2];
  };
  const assign = (iscale: number): void => {
    for (let i = 0; i < n; i++) L[i] = nmax + clamp(nearestInt(f(iscale * x[i])), -nmax, nmax - 1);
  };
  let iscale = f(-nmax / max);
  assign(iscale);
  let [sumlx, suml2] = sums(iscale);
  let scale = suml2 ? f(sumlx / suml2) : 0;
  let best = f(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = f(-f(nmax + f(f(0.1) * is)) / max);
    [sumlx, suml2] = sums(iscale);
    if (suml2 > 0 && f(sumlx * sumlx) > f(best * suml2)) {
      assign(iscale);
      scale = f(sumlx / suml2);
      best = f(scale * sumlx);
    }
  }
  return scale;
}

/** ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j from a Q4_K / Q5_K block's 12 bytes. */
export function scaleMinK4(j: number, q: Uint8Array, at: number): [number, number] {
  if (j < 4) return [q[at + j] & 63, q[at + j + 4] & 63];
  return [(q[at + j + 4] & 0xf) | ((q[at + j - 4] >> 6) << 4), (q[at + j + 4] >> 4) | ((q[at + j] >> 6) << 4)];
}

/**
 * The part Q4_K and Q5_K share for one super-block at `o`: a (scale, min) per 32-value sub-block from
 * make_qkx2_quants (weights rms + |x|), both quantised to 6 bits against the block's largest (d, dmin in
 * f16), then every value re-fitted to the stored scales. Returns the 256 levels in 0..nmax.
 */
function kQuantSuperBlock(
  x: Float32Array,
  out: Uint8Array,
  o: number,
  nmax: number,
  rmin: number,
  nstep: number,
): Uint8Array {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const L = new Uint8Array(QK_K);
  const scales = new Float32Array(8);
  const mins = new Float32Array(8);
  const weights = new Float32Array(32);
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    const sub = x.subarray(32 * j, 32 * j + 32);
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) sumX2 = f(sumX2 + f(sub[l] * sub[l]));
    const avX = f(Math.sqrt(f(sumX2 / 32)));
    for (let l = 0; l < 32; l++) weights[l] = f(avX + Math.abs(sub[l]));
    [scales[j], mins[j]] = makeQkx2Quants(sub, weights, nmax, L.subarray(32 * j, 32 * j + 32), rmin, 0.1, nstep);
    if (scales[j] > maxScale) maxScale = scales[j];
    if (mins[j] > maxMin) maxMin = mins[j];
  }
  const invScale = maxScale > 0 ? f(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? f(63 / maxMin) : 0;
  const sc = o + 4; // 12 bytes of packed 6-bit scales and mins
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(f(invScale * scales[j])) & 0xff);
    const lm = Math.min(63, nearestInt(f(invMin * mins[j])) & 0xff);
    if (j < 4) {
      out[sc + j] = ls;
      out[sc + j + 4] = lm;
    } else {
      out[sc + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      out[sc + j - 4] |= (ls >> 4) << 6;
      out[sc + j] |= (lm >> 4) << 6;
    }
  }
  view.setUint16(o, halfBits(f(maxScale / 63)), true);
  view.setUint16(o + 2, halfBits(f(maxMin / 63)), true);
  const d = halfValue(view.getUint16(o, true));
  const dmin = halfValue(view.getUint16(o + 2, true));
  for (let j = 0; j < 8; j++) {
    const [s, m] = scaleMinK4(j, out, sc);
    const dj = f(d * s);
    if (!dj) continue; // ggml keeps this sub-block's levels from the fit
    const dm = f(dmin * m);
    for (let i = 32 * j; i < 32 * j + 32; i++) L[i] = clamp(nearestInt(f(f(x[i] + dm) / dj)), 0, nmax);
  }
  return L;
}

function superBlocks(src: Float32Array, type: string): number {
  if (src.length % QK_K) throw new Error(`${type} wants a multiple of ${QK_K} values, got ${src.length}`);
  return src.length / QK_K;
}

/** Q4_K: 144 bytes per 256 values: d, dmin (f16), 12 bytes of 6-bit scales/mins, 128 bytes of nibbles. */
export function quantizeQ4_K(src: Float32Array, out: Uint8Array, offset = 0): void {
  const nb = superBlocks(src, 'Q4_K');
  for (let i = 0; i < nb; i++) {
    const o = offset + 144 * i;
    const L = kQuantSuperBlock(src.subarray(QK_K * i, QK_K * (i + 1)), out, o, 15, -1, 20);
    // Per 64 values: 32 bytes, value l in the low nibble of byte l and value l + 32 in its high nibble.
    for (let j = 0, q = o + 16; j < QK_K; j += 64, q += 32)
      for (let l = 0; l < 32; l++) out[q + l] = L[j + l] | (L[j + l + 32] << 4);
  }
}

/** Q5_K: 176 bytes per 256 values: as Q4_K, plus 32 bytes holding each value's fifth bit. */
export function quantizeQ5_K(src: Float32Array, out: Uint8Array, offset = 0): void {
  const nb = superBlocks(src, 'Q5_K');
  for (let i = 0; i < nb; i++) {
    const o = offset + 176 * i;
    const L = kQuantSuperBlock(src.subarray(QK_K * i, QK_K * (i + 1)), out, o, 31, -0.5, 15);
    const qh = o + 16;
    out.fill(0, qh, qh + 32);
    // Per 64 values: low nibbles as Q4_K; the fifth bits of values l and l + 32 go to bits 2k and 2k+1
    // of byte l of qh, k counting the 64-value groups.
    for (let n = 0, ql = o + 48, k = 0; n < QK_K; n += 64, ql += 32, k++) {
      for (let j = 0; j < 32; j++) {
        const l1 = L[n + j];
        const l2 = L[n + j + 32];
        if (l1 > 15) out[qh + j] |= 1 << (2 * k);
        if (l2 > 15) out[qh + j] |= 2 << (2 * k);
        out[ql + j] = (l1 & 15) | ((l2 & 15) << 4);
      }
    }
  }
}

/**
 * Q6_K: 210 bytes per 256 values: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (one per
 * 16 values, quantised against the block's largest with -128), then d (f16). Values are q - 32, q in 0..63.
 */
export function quantizeQ6_K(src: Float32Array, out: Uint8Array, offset = 0): void {
  const nb = superBlocks(src, 'Q6_K');
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const L = new Uint8Array(QK_K);
  const scales = new Float32Array(16);
  for (let i = 0; i < nb; i++) {
    const o = offset + 210 * i;
    const x = src.subarray(QK_K * i, QK_K * (i + 1));
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let ib = 0; ib < 16; ib++) {
      scales[ib] = makeQxQuants(x.subarray(16 * ib, 16 * ib + 16), 32, L.subarray(16 * ib, 16 * ib + 16));
      if (Math.abs(scales[ib]) > maxAbsScale) {
        maxAbsScale = Math.abs(scales[ib]);
        maxScale = scales[ib];
      }
    }
    if (maxAbsScale < GROUP_MAX_EPS) {
      out.fill(0, o, o + 210);
      continue;
    }
    const iscale = f(-128 / maxScale);
    view.setUint16(o + 208, halfBits(f(1 / iscale)), true);
    for (let ib = 0; ib < 16; ib++) view.setInt8(o + 192 + ib, Math.min(127, nearestInt(f(iscale * scales[ib]))));
    const d = halfValue(view.getUint16(o + 208, true));
    for (let j = 0; j < 16; j++) {
      const dj = f(d * view.getInt8(o + 192 + j));
      if (!dj) continue;
      for (let ii = 16 * j; ii < 16 * j + 16; ii++) L[ii] = clamp(nearestInt(f(x[ii] / dj)), -32, 31) + 32;
    }
    // Per 128 values: ql bytes l and l + 32 hold values (l, l + 64) and (l + 32, l + 96) as nibbles; qh byte l
    // holds the high 2 bits of values l, l + 32, l + 64, l + 96.
    for (let j = 0, ql = o, qh = o + 128; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (let l = 0; l < 32; l++) {
        const [a, b, c, e] = [L[j + l], L[j + l + 32], L[j + l + 64], L[j + l + 96]];
        out[ql + l] = (a & 15) | ((c & 15) << 4);
        out[ql + l + 32] = (b & 15) | ((e & 15) << 4);
        out[qh + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
      }
    }
  }
}

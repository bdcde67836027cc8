// float32 -> IEEE half conversion (round to nearest even), as bit patterns in a Uint16Array.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function toHalfBits(v: number): number {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) {
    // Subnormal half (or zero): shift the implicit-1 mantissa into place, round to nearest even.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    const rounded = rem > mid || (rem === mid && half & 1) ? half + 1 : half;
    return sign | rounded;
  }
  const half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // Carry from rounding may bump the exponent; that is still the correct encoding.
  const rounded = rem > 0x1000 || (rem === 0x1000 && half & 1) ? half + 1 : half;
  return sign | rounded;
}

export function toHalfArray(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = toHalfBits(src[i]);
  return out;
}

export function fromHalfBits(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

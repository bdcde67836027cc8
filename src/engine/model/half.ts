/**
 * float32 <-> IEEE binary16 for fp16 KV caches and logits. Node 20 and workerd have no Float16Array, so
 * halves travel as their bit patterns in a Uint16Array (what onnxruntime's 'float16' tensors hold).
 */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The value of one half, exactly (every half is a float32, and a double). */
export function halfValue(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** Every half's float32 value (256 KiB), built on first use: decoding is then one lookup per element. */
let table: Float32Array | undefined;
function halfTable(): Float32Array {
  if (table) return table;
  table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) table[h] = halfValue(h);
  return table;
}

/** Half bits of v, rounded to nearest even (overflow to infinity, underflow through subnormals to zero). */
export function halfBits(v: number): number {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    return sign | (rem > mid || (rem === mid && half & 1) ? half + 1 : half);
  }
  const half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  return sign | (rem > 0x1000 || (rem === 0x1000 && half & 1) ? half + 1 : half); // a carry into the exponent is still right
}

export function toHalf(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = halfBits(src[i]);
  return out;
}

export function fromHalf(src: Uint16Array): Float32Array {
  const t = halfTable();
  const out = new Float32Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = t[src[i]];
  return out;
}

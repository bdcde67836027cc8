/**
 * xoshiro128** (Blackman & Vigna, 2018): 128-bit state, 32-bit outputs. Written with Math.imul and
 * `>>> 0` only, so a seed gives the same sequence in every JS runtime (Node, workerd, browsers).
 */

/** Murmur3's 32-bit finaliser: a bijection on uint32, so distinct inputs give distinct state words. */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

const TWO_POW_32 = 4294967296;

export class Xoshiro128 {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  /**
   * Any safe integer (negative too). The state words are chained through a bijection so that every word
   * depends on both 32-bit halves of the seed: the first output comes from s1, and with a word seeded
   * from one half only, every seed below 2^32 began its stream with the same number (which showed up as
   * seeds 0..N all drawing the same first token). (s0, s1) determine the seed, so distinct seeds give
   * distinct states; the all-zero state, which xoshiro cannot leave, is avoided explicitly.
   */
  constructor(seed: number) {
    if (!Number.isSafeInteger(seed)) throw new RangeError(`seed must be a safe integer, got ${seed}`);
    const lo = seed >>> 0;
    const hi = Math.floor(seed / TWO_POW_32) >>> 0;
    this.s0 = fmix32((lo + 0x9e3779b9) >>> 0);
    this.s1 = fmix32((this.s0 ^ hi ^ 0x7f4a7c15) >>> 0);
    this.s2 = fmix32((this.s1 + lo + 0x3c6ef372) >>> 0);
    this.s3 = fmix32((this.s2 ^ hi ^ 0xdaa66d2b) >>> 0);
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s3 = 1;
  }

  /** Uniform integer in [0, 2^32). */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform double in [0, 1) with 53 random bits (two draws). */
  nextFloat(): number {
    const a = this.nextUint32() >>> 5; // 27 bits
    const b = this.nextUint32() >>> 6; // 26 bits
    return (a * 67108864 + b) / 9007199254740992;
  }
}

/** A fresh seed for requests that gave none: 53 bits from the platform CSPRNG (Node >= 20 and workerd). */
export function randomSeed(): number {
  const words = globalThis.crypto.getRandomValues(new Uint32Array(2));
  return (words[0] & 0x1fffff) * TWO_POW_32 + words[1];
}

/** mulberry32: a small seeded PRNG for test data, so a failure reproduces from its seed. Floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `count` pseudo-random integers in [lo, hi), e.g. token ids for prompts. */
export function randomIds(seed: number, count: number, lo: number, hi: number): number[] {
  const next = mulberry32(seed);
  return Array.from({ length: count }, () => lo + Math.floor(next() * (hi - lo)));
}

import { mulberry32 } from '../../scripts/lib/mulberry32.js';

export { mulberry32 };

/** `count` pseudo-random integers in [lo, hi), e.g. token ids for prompts. */
export function randomIds(seed: number, count: number, lo: number, hi: number): number[] {
  const next = mulberry32(seed);
  return Array.from({ length: count }, () => lo + Math.floor(next() * (hi - lo)));
}

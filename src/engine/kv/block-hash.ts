/**
 * Prefix-cache identity of a full block: a hash chained through its parent's hash, so a block's hash
 * names the whole prefix up to and including it, and the model id, so two models never share blocks.
 * 64 bits from two independent 32-bit mixes (collisions ~2^-64 for a pool's worth of blocks).
 */
export function blockHash(parentHash: string, tokens: ArrayLike<number>, modelId: string): string {
  let a = 0x811c9dc5 ^ tokens.length;
  let b = 0x9e3779b9 ^ tokens.length;
  const mix = (v: number): void => {
    a = Math.imul(a ^ v, 0x01000193);
    b = Math.imul(b ^ (v + 0x7f4a7c15), 0x5bd1e995);
    b ^= b >>> 15;
  };
  for (const s of [modelId, parentHash]) {
    for (let i = 0; i < s.length; i++) mix(s.charCodeAt(i));
    mix(0xffff_ffff);
  }
  for (let i = 0; i < tokens.length; i++) mix(tokens[i]);
  a = Math.imul(a ^ (a >>> 16), 0x85ebca6b);
  b = Math.imul(b ^ (b >>> 13), 0xc2b2ae35);
  return (a >>> 0).toString(16).padStart(8, '0') + ((b ^ (b >>> 16)) >>> 0).toString(16).padStart(8, '0');
}

/** The hash before the first block. */
export const ROOT_HASH = '';

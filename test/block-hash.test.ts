import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { blockHash } from '../src/engine/kv/block-hash.js';
import { sha256Hex } from '../src/engine/kv/sha256.js';
import { mulberry32 } from './helpers/prng.js';

describe('prefix-cache block hashes', () => {
  it('sha256Hex equals node:crypto on the FIPS vectors and on every length around the block boundaries', () => {
    expect(sha256Hex(new TextEncoder().encode('abc'))).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    );
    expect(sha256Hex(new Uint8Array(0))).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    const next = mulberry32(5);
    for (let length = 0; length < 200; length++) {
      const bytes = Uint8Array.from({ length }, () => Math.floor(next() * 256));
      expect(sha256Hex(bytes), `length ${length}`).toBe(createHash('sha256').update(bytes).digest('hex'));
    }
  });

  it('names the parent, the tokens and the model', () => {
    const base = blockHash('', [1, 2, 3, 4], 'tiny');
    expect(blockHash('', [1, 2, 3, 4], 'tiny')).toBe(base);
    expect(blockHash('', [1, 2, 3, 5], 'tiny')).not.toBe(base);
    expect(blockHash(base, [1, 2, 3, 4], 'tiny')).not.toBe(base);
    expect(blockHash('', [1, 2, 3, 4], 'other')).not.toBe(base);
    expect(blockHash('', [258], 'tiny')).not.toBe(blockHash('', [1, 2], 'tiny')); // ids are fixed-width, not concatenated digits
  });
});

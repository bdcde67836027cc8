// What every KvBlockStore must do, run against each one: MemoryKvBlockStore in Node (test/kv-store.test.ts)
// and SqlKvBlockStore on a Durable Object's SQLite in workerd (test/workers/kv-block-store.test.ts).
import { expect } from 'vitest';
import type { KvBlockStore } from '../../src/engine/kv/block-store.js';

export interface KvStoreCase {
  name: string;
  budget: number;
  run(store: KvBlockStore): void;
}

const BYTES = 1000;
const bytes = (hash: string): Uint8Array => new Uint8Array(BYTES).fill(hash.charCodeAt(0) + hash.length);
/** Writes blocks as one chain, root first. */
const chain = (store: KvBlockStore, hashes: string[]): void => {
  for (const [i, hash] of hashes.entries())
    expect(store.write({ hash, parent: hashes[i - 1] ?? '', bytes: bytes(hash) })).toBe(true);
};
const has = (store: KvBlockStore, hashes: string[]): boolean[] => hashes.map((h) => store.has(h));

export const KV_STORE_CASES: KvStoreCase[] = [
  {
    name: 'reads back what it wrote, once; a block larger than the budget is not stored',
    budget: 10 * BYTES,
    run(store) {
      chain(store, ['a1', 'a2']);
      expect(store.read('a2')).toEqual(bytes('a2'));
      expect(store.read('nothing')).toBeUndefined();
      expect(store.write({ hash: 'a1', parent: '', bytes: bytes('a1') })).toBe(false);
      expect(store.write({ hash: 'huge', parent: '', bytes: new Uint8Array(11 * BYTES) })).toBe(false);
      expect(store.usage()).toMatchObject({ blocks: 2, bytes: 2 * BYTES, budgetBytes: 10 * BYTES, discarded: 0 });
    },
  },
  {
    name: 'stays within its budget, evicting the least recently used chain from its tip',
    budget: 5 * BYTES,
    run(store) {
      chain(store, ['a1', 'a2', 'a3']);
      store.touch(['a1', 'a2', 'a3']);
      chain(store, ['b1', 'b2']);
      store.touch(['b1', 'b2']);
      chain(store, ['c1']);
      expect(store.usage().bytes).toBeLessThanOrEqual(5 * BYTES);
      expect(has(store, ['a1', 'a2', 'a3', 'b1', 'b2', 'c1'])).toEqual([true, true, false, true, true, true]);
    },
  },
  {
    name: 'evicts only leaves: a block older than its child still outlives it',
    budget: 2 * BYTES,
    run(store) {
      chain(store, ['r', 'rc']);
      store.touch(['rc']); // the child is now newer than its parent
      chain(store, ['x']);
      expect(has(store, ['r', 'rc', 'x'])).toEqual([true, false, true]);
    },
  },
  {
    name: 'pinned chains go last; unpinning deletes what only that session pinned',
    budget: 4 * BYTES,
    run(store) {
      chain(store, ['s1', 's2']);
      chain(store, ['x1']);
      chain(store, ['x2']);
      store.pin('session-a', ['s1', 's2']);
      store.pin('session-b', ['s1']);
      chain(store, ['y1']);
      chain(store, ['y2']);
      expect(has(store, ['s1', 's2', 'x1', 'x2', 'y1', 'y2'])).toEqual([true, true, false, false, true, true]);
      store.unpin('session-a');
      expect(has(store, ['s1', 's2'])).toEqual([true, false]); // session-b still needs s1
      expect(store.storedTokens('session-a')).toBe(0);
    },
  },
  {
    name: "a session's stored tokens end at the first block of its chain that is missing",
    budget: 10 * BYTES,
    run(store) {
      chain(store, ['g1', 'g2', 'g3']);
      store.pin('owner', ['g1', 'g2', 'g3', 'g4']);
      expect(store.storedTokens('owner')).toBe(3 * 16);
      store.pin('other', ['g1', 'missing', 'g3']);
      expect(store.storedTokens('other')).toBe(16);
    },
  },
  {
    name: "a partial last block counts its own tokens, and a session's next chain deletes the one it replaces (unless another session pins it)",
    budget: 10 * BYTES,
    run(store) {
      chain(store, ['t1', 't2', 't2+5']);
      store.pin('owner', ['t1', 't2', 't2+5']);
      expect(store.storedTokens('owner')).toBe(2 * 16 + 5);
      chain(store, ['t3', 't3+9']);
      store.pin('owner', ['t1', 't2', 't3', 't3+9']);
      expect(has(store, ['t1', 't2', 't2+5', 't3', 't3+9'])).toEqual([true, true, false, true, true]);
      expect(store.storedTokens('owner')).toBe(3 * 16 + 9);
      store.pin('twin', ['t1', 't2', 't3', 't3+9']); // the same tokens in another session
      chain(store, ['t4+1']);
      store.pin('owner', ['t1', 't2', 't3', 't4+1']);
      expect(has(store, ['t3+9', 't4+1'])).toEqual([true, true]);
      store.unpin('owner');
      expect(has(store, ['t1', 't3+9', 't4+1'])).toEqual([true, true, false]);
    },
  },
  {
    name: 'drops everything when the cache identity changes (other weights, dtype, KV dtype, code)',
    budget: 10 * BYTES,
    run(store) {
      chain(store, ['k1']);
      store.pin('session', ['k1']);
      store.open('identity', 16);
      expect(store.has('k1')).toBe(true);
      store.open('another identity', 16);
      expect(store.has('k1')).toBe(false);
      expect(store.storedTokens('session')).toBe(0);
      expect(store.usage()).toMatchObject({ blocks: 0, bytes: 0 });
    },
  },
];

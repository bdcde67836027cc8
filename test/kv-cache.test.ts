// The paged KV cache on its own: block pool bookkeeping, prefix caching, copy-on-write forks and
// preemption, property-tested over random operation sequences. Values written for a token are a
// function of its whole prefix (as a real model's keys are), so a block served from the cache or
// shared by a fork must read back exactly what a fresh computation would have written.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BlockPool } from '../src/engine/kv/block-pool.js';
import { KvCacheManager, type PagedSequenceKv } from '../src/engine/kv/paged-kv.js';
import type { KvShape } from '../src/engine/kv/block-pool.js';
import { applyKvTransfers, clearTokensFrom } from '../src/engine/kv/kv-memory.js';
import { KV_DTYPES, kvRowBytes } from '../src/engine/kv/kv-dtype.js';
import { ArrayKvMemory } from '../src/engine/runners/array-kv-memory.js';

const SHAPE: KvShape = { numLayers: 2, numKvHeads: 2, headDim: 3 };
const BLOCK = 4;

/** The "key" a model would store for position `pos` of `tokens`: depends on tokens[0..pos] only. */
function keyAt(tokens: readonly number[], pos: number, layer: number, head: number, d: number): number {
  let h = 17;
  for (let i = 0; i <= pos; i++) h = (Math.imul(h, 31) + tokens[i] + 1) | 0;
  return ((h ^ (layer * 7919 + head * 131 + d * 17)) % 100_003) + 0.5;
}

/** A pool's bookkeeping and its bytes (JS arrays, as onnxruntime's runner keeps them), and their manager. */
function newCache(
  numBlocks: number,
  identity = 'm',
): { pool: BlockPool; memory: ArrayKvMemory; manager: KvCacheManager } {
  const pool = new BlockPool(SHAPE, numBlocks, BLOCK);
  const memory = new ArrayKvMemory(SHAPE, numBlocks, BLOCK);
  const manager = new KvCacheManager(pool, identity);
  memories.set(manager, memory);
  return { pool, memory, manager };
}

const memories = new WeakMap<KvCacheManager, ArrayKvMemory>();

/**
 * The manager's memory, with the copies the manager planned since last asked moved there first, as the step
 * does before a pass (the manager itself never touches bytes).
 */
function arrays(manager: KvCacheManager): ArrayKvMemory {
  const memory = memories.get(manager);
  if (!memory) throw new Error('not a manager newCache made');
  applyKvTransfers(memory, manager.takeTransfers());
  return memory;
}

/** Computes and stores tokens [kv.length, tokens.length) like a model pass would (checked as a runner checks). */
function writeTokens(memory: ArrayKvMemory, kv: PagedSequenceKv, tokens: readonly number[]): void {
  const start = kv.length;
  const count = tokens.length - start;
  kv.checkWritable(count);
  for (let layer = 0; layer < SHAPE.numLayers; layer++) {
    const keys = new Float32Array(SHAPE.numKvHeads * count * SHAPE.headDim); // (kv_heads, count, head_dim)
    const values = new Float32Array(keys.length);
    for (let h = 0; h < SHAPE.numKvHeads; h++)
      for (let t = 0; t < count; t++)
        for (let d = 0; d < SHAPE.headDim; d++) {
          keys[(h * count + t) * SHAPE.headDim + d] = keyAt(tokens, start + t, layer, h, d);
          values[(h * count + t) * SHAPE.headDim + d] = -keyAt(tokens, start + t, layer, h, d);
        }
    memory.scatter(kv, layer, keys, values, count, 0, count);
  }
  kv.advance(count);
}

/** Gathers the sequence with some left padding and checks every cached value. */
function checkContents(memory: ArrayKvMemory, kv: PagedSequenceKv, tokens: readonly number[]): void {
  const pad = 3;
  const slots = kv.length + pad;
  for (let layer = 0; layer < SHAPE.numLayers; layer++) {
    const keys = new Float32Array(SHAPE.numKvHeads * slots * SHAPE.headDim);
    const values = new Float32Array(keys.length);
    memory.gather(kv, layer, keys, values, slots, pad);
    for (let h = 0; h < SHAPE.numKvHeads; h++)
      for (let t = 0; t < kv.length; t++)
        for (let d = 0; d < SHAPE.headDim; d++) {
          const at = (h * slots + pad + t) * SHAPE.headDim + d;
          if (keys[at] !== keyAt(tokens, t, layer, h, d) || values[at] !== -keyAt(tokens, t, layer, h, d)) {
            throw new Error(`wrong KV at layer ${layer} head ${h} position ${t}`);
          }
        }
  }
}

interface Live {
  kv: PagedSequenceKv;
  tokens: number[];
}

type Op =
  | { kind: 'add'; tokens: number[] }
  | { kind: 'step'; which: number; token: number }
  | { kind: 'fork'; which: number }
  | { kind: 'cancel'; which: number }
  | { kind: 'preempt'; which: number }
  | { kind: 'speculate'; which: number; proposals: number[]; accepted: number }
  | { kind: 'rewind'; which: number; keep: number };

const token = fc.integer({ min: 0, max: 2 }); // a tiny alphabet, so prefixes repeat and blocks get reused
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('add' as const), tokens: fc.array(token, { minLength: 1, maxLength: 14 }) }),
  fc.record({ kind: fc.constant('step' as const), which: fc.nat(), token }),
  fc.record({ kind: fc.constant('fork' as const), which: fc.nat() }),
  fc.record({ kind: fc.constant('cancel' as const), which: fc.nat() }),
  fc.record({ kind: fc.constant('preempt' as const), which: fc.nat() }),
  fc.record({
    kind: fc.constant('speculate' as const),
    which: fc.nat(),
    proposals: fc.array(token, { minLength: 1, maxLength: 9 }),
    accepted: fc.nat(),
  }),
  fc.record({ kind: fc.constant('rewind' as const), which: fc.nat(), keep: fc.nat() }),
);

/** Admits a sequence like the scheduler does: prefix hits, then room for the rest, else nothing held. */
function admit(manager: KvCacheManager, tokens: number[], salt?: string): Live | null {
  const kv = manager.create(salt);
  manager.matchPrefix(kv, tokens);
  if (!manager.reserve(kv, tokens.length - kv.length)) {
    manager.free(kv);
    return null;
  }
  writeTokens(arrays(manager), kv, tokens);
  manager.commit(kv, tokens);
  return { kv, tokens };
}

function run(ops: Op[], numBlocks: number): void {
  const { pool, memory, manager } = newCache(numBlocks, 'model-a');
  const live: Live[] = [];
  const pick = (i: number): Live | undefined => live[i % Math.max(live.length, 1)];
  for (const op of ops) {
    if (op.kind === 'add') {
      const seq = admit(manager, op.tokens);
      if (seq) live.push(seq);
    } else if (op.kind === 'step') {
      const seq = pick(op.which);
      if (seq && manager.reserve(seq.kv, 1)) {
        seq.tokens.push(op.token);
        writeTokens(arrays(manager), seq.kv, seq.tokens);
        manager.commit(seq.kv, seq.tokens);
      }
    } else if (op.kind === 'speculate') {
      // A verification pass writes every proposal, then the rejected ones are cut off again.
      const seq = pick(op.which);
      if (seq && manager.reserve(seq.kv, op.proposals.length)) {
        writeTokens(arrays(manager), seq.kv, [...seq.tokens, ...op.proposals]);
        seq.tokens.push(...op.proposals.slice(0, op.accepted % (op.proposals.length + 1)));
        manager.truncate(seq.kv, seq.tokens.length);
        manager.commit(seq.kv, seq.tokens);
      }
    } else if (op.kind === 'rewind') {
      // A draft cache dropping its rejected tail may cut into full blocks already cached and shared;
      // the next write into a kept partial block must copy it, not write the cached one.
      const seq = pick(op.which);
      if (seq) {
        seq.tokens.length = op.keep % (seq.tokens.length + 1);
        manager.truncate(seq.kv, seq.tokens.length);
      }
    } else if (op.kind === 'fork') {
      const seq = pick(op.which);
      if (seq) live.push({ kv: manager.fork(seq.kv), tokens: [...seq.tokens] });
    } else {
      const seq = pick(op.which);
      if (!seq) continue;
      manager.free(seq.kv);
      live.splice(live.indexOf(seq), 1);
      if (op.kind === 'preempt') {
        // Recompute: the same tokens are admitted again and must read back the same values.
        const again = admit(manager, seq.tokens);
        if (again) live.push(again);
      }
    }
    pool.checkInvariants();
    for (const seq of live) checkContents(memory, seq.kv, seq.tokens);
  }
  for (const seq of live) manager.free(seq.kv);
  pool.checkInvariants();
  expect(pool.stats().used).toBe(0);
}

describe('paged KV cache invariants (fast-check)', () => {
  it('no leaks, no negative counts, no writes into shared blocks, contents always right (speculative rollback too)', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 60 }), fc.integer({ min: 2, max: 24 }), (ops, numBlocks) =>
        run(ops, numBlocks),
      ),
      { numRuns: 300 },
    );
  });
});

describe('paged KV cache, by example', () => {
  it('a second sequence with the same prefix reuses its full blocks and computes only the rest', () => {
    const { manager } = newCache(16);
    const prefix = [1, 2, 0, 1, 2, 2, 0, 1, 1]; // two full blocks and one token
    const a = admit(manager, [...prefix, 0, 0])!;
    const kv = manager.create();
    expect(manager.matchPrefix(kv, [...prefix, 2, 2, 2])).toBe(8);
    expect(kv.blocks.slice(0, 2)).toEqual(a.kv.blocks.slice(0, 2));
    // Another model never shares blocks.
    const other = new KvCacheManager(manager.pool, 'model-b');
    expect(other.matchPrefix(other.create(), [...prefix, 2])).toBe(0);
    manager.free(kv);
  });

  it('a salted sequence shares blocks only with its own salt, through forks and the tail of a session', () => {
    const { manager } = newCache(16);
    const prompt = [1, 2, 0, 1, 2, 2, 0, 1, 1, 0]; // two full blocks
    const alice = admit(manager, prompt, 'alice')!;
    expect(manager.matchPrefix(manager.create(), prompt)).toBe(0); // unsalted
    expect(manager.matchPrefix(manager.create('bob'), prompt)).toBe(0);
    const again = manager.create('alice');
    expect(manager.matchPrefix(again, prompt)).toBe(8);
    expect(again.blocks).toEqual(alice.kv.blocks.slice(0, 2));
    // A fork keeps its parent's salt: blocks it commits are found under that salt.
    const child = manager.fork(alice.kv);
    expect(child.root).toBe(alice.kv.root);
    expect(manager.tailOf(alice.kv, prompt, 's')?.hash).not.toBe(
      manager.tailOf(admit(manager, prompt, 'bob')!.kv, prompt, 's')?.hash,
    );
  });

  it('never reuses the whole prompt: its last token must be computed for logits', () => {
    const { manager } = newCache(16);
    const prompt = [1, 2, 0, 1, 2, 2, 0, 1]; // exactly two blocks
    admit(manager, prompt);
    expect(manager.matchPrefix(manager.create(), prompt)).toBe(4);
  });

  it('evicts idle cached blocks least recently used first, and only when space is needed', () => {
    const { pool, manager } = newCache(4);
    const first = admit(manager, [0, 0, 0, 0, 1])!;
    const second = admit(manager, [1, 1, 1, 1, 2])!;
    manager.free(first.kv);
    manager.free(second.kv);
    expect(pool.stats()).toMatchObject({ used: 0, cachedIdle: 2, free: 2 });
    const third = admit(manager, [2, 2, 2, 2, 2, 2, 2, 2, 0])!; // needs 3 blocks: 2 free + evict the oldest
    expect(pool.evictions).toBe(1);
    expect(manager.matchPrefix(manager.create(), [0, 0, 0, 0, 1])).toBe(0);
    const kv = manager.create();
    expect(manager.matchPrefix(kv, [1, 1, 1, 1, 2])).toBe(4);
    manager.free(kv);
    manager.free(third.kv);
    pool.checkInvariants();
  });

  it('evictIdle forgets every cached block no sequence holds, and keeps held ones', () => {
    const { pool, manager } = newCache(8);
    const idle = admit(manager, [0, 0, 0, 0, 1])!;
    const held = admit(manager, [1, 1, 1, 1, 2])!;
    manager.free(idle.kv);
    expect(pool.evictIdle()).toBe(1);
    expect(pool.stats()).toMatchObject({ cachedIdle: 0, used: 2 });
    expect(manager.matchPrefix(manager.create(), [0, 0, 0, 0, 1])).toBe(0);
    const kv = manager.create();
    expect(manager.matchPrefix(kv, [1, 1, 1, 1, 2])).toBe(4);
    manager.free(kv);
    manager.free(held.kv);
    pool.checkInvariants();
  });

  it('a block read out and written into another block of another pool reads back the same', () => {
    const { memory, manager } = newCache(4);
    const seq = admit(manager, [5, 6, 7, 8, 9])!;
    const other = new ArrayKvMemory(SHAPE, 4, BLOCK);
    return memory.readBlock(seq.kv.blocks[0]).then((bytes) => {
      expect(bytes.length).toBe(memory.blockBytes);
      other.writeBlock(3, bytes);
      for (let layer = 0; layer < SHAPE.numLayers; layer++) {
        const n = memory.blockStride;
        const at = seq.kv.blocks[0] * n;
        expect(other.keys[layer].subarray(3 * n, 4 * n)).toEqual(memory.keys[layer].subarray(at, at + n));
        expect(other.values[layer].subarray(3 * n, 4 * n)).toEqual(memory.values[layer].subarray(at, at + n));
      }
      expect(() => other.writeBlock(0, bytes.subarray(1))).toThrow(RangeError);
    });
  });

  it('clearTokensFrom zeroes a stored block past its tokens, in every layer and head (fp32, fp16, int8)', () => {
    for (const dtype of KV_DTYPES) {
      const row = kvRowBytes(SHAPE.headDim, dtype);
      const bytes4 = 4 * SHAPE.numKvHeads * BLOCK * row;
      const make = () =>
        Array.from({ length: SHAPE.numLayers }, () =>
          dtype === 'fp16'
            ? new Uint16Array(bytes4 / 2)
            : dtype === 'int8'
              ? new Int8Array(bytes4)
              : new Float32Array(bytes4 / 4),
        );
      const memory = new ArrayKvMemory(SHAPE, 4, BLOCK, dtype, { keys: make(), values: make() });
      expect(memory.blockBytes).toBe(2 * SHAPE.numLayers * SHAPE.numKvHeads * BLOCK * row);
      for (const array of [...memory.keys, ...memory.values]) array.fill(1);
      const bytes = memory.readBlockNow(2);
      clearTokensFrom(bytes, SHAPE, BLOCK, 3);
      const cleared = new ArrayKvMemory(SHAPE, 4, BLOCK, dtype, { keys: make(), values: make() });
      cleared.writeBlock(1, bytes);
      const perRow = row / cleared.keys[0].BYTES_PER_ELEMENT; // elements of one (token, head) row
      for (const array of [...cleared.keys, ...cleared.values])
        for (let h = 0; h < SHAPE.numKvHeads; h++)
          for (let t = 0; t < BLOCK; t++)
            for (let d = 0; d < perRow; d++) {
              const at = cleared.blockStride + h * cleared.headStride + t * perRow + d;
              expect(array[at], `${dtype} head ${h} token ${t}`).toBe(t < 3 ? 1 : 0);
            }
      expect(() => clearTokensFrom(bytes.subarray(2), SHAPE, BLOCK, 1)).toThrow(RangeError);
    }
  });

  it('a fork shares every block; the first write into the shared partial block copies it', () => {
    const { pool, memory, manager } = newCache(8);
    const parent = admit(manager, [0, 1, 2, 0, 1, 2])!;
    const child = manager.fork(parent.kv);
    expect(child.blocks).toEqual(parent.kv.blocks);
    expect(pool.refCount(parent.kv.blocks[1])).toBe(2);
    expect(manager.reserve(child, 1)).toBe(true);
    expect(child.blocks[0]).toBe(parent.kv.blocks[0]);
    expect(child.blocks[1]).not.toBe(parent.kv.blocks[1]);
    expect(manager.copyOnWrites).toBe(1);
    expect(manager.takeTransfers(), 'the copy is planned, not made').toEqual([
      { kind: 'copy', from: parent.kv.blocks[1], to: child.blocks[1] },
    ]);
    memory.copyBlock(parent.kv.blocks[1], child.blocks[1]);
    writeTokens(memory, child, [0, 1, 2, 0, 1, 2, 2]);
    checkContents(memory, child, [0, 1, 2, 0, 1, 2, 2]);
    checkContents(memory, parent.kv, parent.tokens);
    manager.free(child);
    manager.free(parent.kv);
    pool.checkInvariants();
  });

  it('a reservation the pool cannot meet fails and changes nothing', () => {
    const { pool, manager } = newCache(2);
    const kv = manager.create();
    const before = pool.stats();
    expect(manager.reserve(kv, 3 * BLOCK)).toBe(false);
    expect(pool.stats()).toEqual(before);
    expect(kv.blocks).toEqual([]);
  });

  it('refuses to write a shared block', () => {
    const { memory, manager } = newCache(4);
    const parent = admit(manager, [0, 1])!;
    const child = manager.fork(parent.kv);
    expect(() => writeTokens(memory, child, [0, 1, 2])).toThrow(/shared or cached/);
  });
});

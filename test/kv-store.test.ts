import { describe, expect, it } from 'vitest';
import type { Engine, EngineOptions } from '../src/engine/engine.js';
import { blockChecksum } from '../src/engine/kv/block-store.js';
import { MemoryKvBlockStore } from '../src/engine/kv/memory-block-store.js';
import type { NodeBackend } from '../scripts/lib/runtimes.js';
import { collect, loadEngine, randomIds } from './helpers/engines.js';

// Durable KV blocks: an engine writes finished sequences' full blocks to a store, and a fresh engine
// (a restarted object) restores them instead of prefilling, with output identical to a never-stopped one.

const BLOCK = 16;
const MB = 2 ** 20;

async function greedy(engine: Engine, prompt: number[], session?: string): Promise<{ ids: number[]; cached: number }> {
  const { tokens, done } = await collect(engine, { prompt_ids: prompt, max_tokens: 24, temperature: 0, ignore_eos: true }, undefined, session);
  return { ids: tokens.map((t) => t.tokenId), cached: done.metrics.cachedTokens };
}

const backends: [NodeBackend, EngineOptions][] = [
  ['cpu', {}],
  ['kernels', {}],
  ['kernels', { kvDtype: 'fp16' }],
  ['ort-wasm', {}],
];

describe.each(backends)('a fresh engine restores stored blocks (%s %j)', (backend, options) => {
  it('gives the never-restarted tokens, with the stored history counted as cached', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const history = randomIds(501, 150, 3, 400);
    const first = await loadEngine(backend, 'tiny', { ...options, kvStore: store });
    const turn1 = await greedy(first, history, 's1');
    await first.storeKv();
    const log = [...history, ...turn1.ids];
    // Full blocks of what the pass computed: the last sampled token never was.
    const storedBlocks = Math.floor((log.length - 1) / BLOCK);
    expect(store.usage().blocks).toBe(storedBlocks);
    const turn2Prompt = [...log, ...randomIds(502, 9, 3, 400)];
    const reference = await greedy(first, turn2Prompt, 's1');
    expect(reference.cached).toBe(log.length - 1);

    const restarted = await loadEngine(backend, 'tiny', { ...options, kvStore: store });
    const restored = await greedy(restarted, turn2Prompt, 's1');
    expect(restored.ids).toEqual(reference.ids);
    expect(restored.cached).toBe(storedBlocks * BLOCK);
    expect(restarted.stats().kvStore?.restored.blocks).toBe(storedBlocks);
    expect(restarted.stats().prefillTokens).toBe(turn2Prompt.length - storedBlocks * BLOCK);
    await first.runner.release();
    await restarted.runner.release();
  });
});

describe('what is stored', () => {
  it('a prefix shared by sessions and stateless requests is stored once', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const engine = await loadEngine('kernels', 'tiny', { kvStore: store });
    const system = randomIds(505, 64, 3, 400); // four full blocks every prompt starts with
    const prompts = [1, 2, 3].map((k) => [...system, ...randomIds(510 + k, 40, 3, 400)]);
    await greedy(engine, prompts[0], 'a');
    await greedy(engine, prompts[1], 'b');
    await greedy(engine, prompts[2]);
    await engine.storeKv();
    // Each: 64 + 40 prompt + 24 generated - 1 computed = 127 tokens, 7 full blocks, of which 4 are the shared ones.
    expect(store.usage().blocks).toBe(4 + 3 * 3);
    expect(engine.stats().kvStore?.storedBlocks).toBe(13);
    expect(store.storedTokens('a')).toBe(7 * BLOCK);
    expect(store.storedTokens('b')).toBe(7 * BLOCK);
    // A deleted session takes what only it needed; the shared prefix stays for the other.
    store.unpin('a');
    expect(store.usage().blocks).toBe(4 + 2 * 3);
    expect(store.storedTokens('b')).toBe(7 * BLOCK);
    await engine.runner.release();
  });

  it('nothing is written until the host asks, and nothing of a session deleted before then', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const engine = await loadEngine('kernels', 'tiny', { kvStore: store });
    await greedy(engine, randomIds(506, 60, 3, 400), 'gone');
    expect(store.usage().blocks).toBe(0);
    engine.releaseSession('gone');
    await engine.storeKv();
    expect(store.usage().blocks).toBe(0);
    expect(store.storedTokens('gone')).toBe(0);
    await engine.runner.release();
  });
});

describe('stored blocks that cannot be trusted', () => {
  it('a damaged block ends the restored chain there; the rest is prefilled and the output is unchanged', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const prompt = randomIds(503, 120, 3, 400);
    const first = await loadEngine('kernels', 'tiny', { kvStore: store });
    const want = await greedy(first, prompt);
    await first.storeKv();
    const chain = chainOf(first, prompt);
    store.corrupt(chain[3]);
    const second = await loadEngine('kernels', 'tiny', { kvStore: store });
    const got = await greedy(second, prompt);
    expect(got.ids).toEqual(want.ids);
    expect(got.cached).toBe(3 * BLOCK);
    expect(store.has(chain[3])).toBe(false);
    // The prefilled blocks are written again after the request, so a third engine restores them all.
    await second.storeKv();
    const third = await loadEngine('kernels', 'tiny', { kvStore: store });
    expect((await greedy(third, prompt)).cached).toBe(chain.length * BLOCK);
  });

  it('blocks from another weights file, dtype or KV dtype are never restored (the store drops them)', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const prompt = randomIds(504, 80, 3, 400);
    await writeThrough(await loadEngine('kernels', 'tiny', { kvStore: store }), prompt);
    expect(store.usage().blocks).toBeGreaterThan(0);
    for (const other of [
      { dtype: 'int8' as const },
      { kvDtype: 'fp16' as const },
    ]) {
      const engine = await loadEngine('kernels', 'tiny', { ...other, kvStore: store });
      expect((await greedy(engine, prompt)).cached).toBe(0);
      await engine.storeKv();
    }
    // Same shapes, other weights (tiny-copy), served under the same name.
    const copy = await loadEngine('kernels', 'tiny-copy', { modelId: 'default', kvStore: store });
    expect((await greedy(copy, prompt)).cached).toBe(0);
    // And the same weights under another runner (onnxruntime's float32 results differ in the last bits).
    const ort = await loadEngine('cpu', 'tiny', { kvStore: store });
    expect((await greedy(ort, prompt)).cached).toBe(0);
  });
});

describe('MemoryKvBlockStore: budget, eviction order, pins', () => {
  const block = (n: number): Uint8Array => new Uint8Array(1000).fill(n);
  const write = (store: MemoryKvBlockStore, hash: string, parent = ''): void => store.write({ hash, parent, bytes: block(hash.charCodeAt(0)) });

  it('stays within its budget, evicting the least recently used chain from its tip', () => {
    const store = new MemoryKvBlockStore(5000);
    store.open('id', 16);
    for (const h of ['a1', 'a2', 'a3']) write(store, h);
    store.touch(['a1', 'a2', 'a3']);
    for (const h of ['b1', 'b2']) write(store, h);
    store.touch(['b1', 'b2']);
    expect(store.usage()).toEqual({ blocks: 5, bytes: 5000, budgetBytes: 5000, discarded: 0 });
    write(store, 'c1');
    expect(store.usage().bytes).toBeLessThanOrEqual(5000);
    // a's chain is oldest, and its tip goes before its root.
    expect(['a1', 'a2', 'a3'].map((h) => store.has(h))).toEqual([true, true, false]);
  });

  it('pinned chains go last, and unpinning deletes what only that session held', () => {
    const store = new MemoryKvBlockStore(4000);
    store.open('id', 16);
    for (const h of ['s1', 's2', 'x1', 'x2']) write(store, h);
    store.pin('session-a', ['s1', 's2']);
    store.pin('session-b', ['s1']);
    write(store, 'y1');
    write(store, 'y2');
    expect(['s1', 's2', 'x1', 'x2'].map((h) => store.has(h))).toEqual([true, true, false, false]);
    store.unpin('session-a');
    expect(store.has('s1')).toBe(true); // session-b still needs it
    expect(store.has('s2')).toBe(false);
  });

  it('checks every read against the checksum', () => {
    const store = new MemoryKvBlockStore(4000);
    store.open('id', 16);
    write(store, 'k1');
    expect(store.read('k1')).toEqual(block('k'.charCodeAt(0)));
    store.corrupt('k1');
    expect(store.read('k1')).toBeUndefined();
    expect(store.has('k1')).toBe(false);
    expect(blockChecksum(block(1))).not.toBe(blockChecksum(block(2)));
    const flipped = block(1);
    flipped[999] ^= 1;
    expect(blockChecksum(flipped)).not.toBe(blockChecksum(block(1)));
  });
});

/** The prefix hashes of `prompt`'s full blocks in `engine`'s pool (a request's chain). */
function chainOf(engine: Engine, prompt: number[]): string[] {
  const kv = engine.kv.create();
  engine.kv.matchPrefix(kv, [...prompt, 0]);
  const chain = [...kv.hashes];
  engine.kv.free(kv);
  return chain;
}

async function writeThrough(engine: Engine, prompt: number[]): Promise<void> {
  await greedy(engine, prompt);
  await engine.storeKv();
  await engine.runner.release();
}

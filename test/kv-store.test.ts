import { describe, expect, it } from 'vitest';
import type { Engine, EngineOptions } from '../src/engine/engine.js';
import { blockHash, ROOT_HASH, tailHash } from '../src/engine/kv/block-hash.js';
import { BlockPersistence } from '../src/engine/kv/block-persistence.js';
import { BlockPool } from '../src/engine/kv/block-pool.js';
import { blockChecksum } from '../src/engine/kv/block-store.js';
import { MemoryKvBlockStore } from '../src/engine/kv/memory-block-store.js';
import { ArrayKvMemory } from '../src/engine/runners/array-kv-memory.js';
import type { NodeBackend } from '../scripts/lib/runtimes.js';
import { collect, loadEngine, randomIds } from './helpers/engines.js';
import { KV_STORE_CASES } from './helpers/kv-store-cases.js';

// Durable KV blocks: an engine writes finished sequences' full blocks to a store, and a fresh engine
// (a restarted object) restores them instead of prefilling, with output identical to a never-stopped one.

const BLOCK = 16;
const MB = 2 ** 20;

/** The store's name for the partial last block of `session`, whose cache holds `tokens`. */
function tailName(engine: Engine, tokens: readonly number[], session: string): string {
  const identity = engine.kv.cacheIdentity;
  const full = Math.floor(tokens.length / BLOCK);
  let parent = ROOT_HASH;
  for (let i = 0; i < full; i++) parent = blockHash(parent, tokens.slice(i * BLOCK, (i + 1) * BLOCK), identity);
  return tailHash(parent, tokens.slice(full * BLOCK), identity, session);
}

async function greedy(engine: Engine, prompt: number[], session?: string): Promise<{ ids: number[]; cached: number }> {
  const { tokens, done } = await collect(
    engine,
    { prompt_ids: prompt, max_tokens: 24, temperature: 0, ignore_eos: true },
    undefined,
    session,
  );
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
    // What the pass computed (the last sampled token never was): its full blocks, and its partial last block.
    const computed = log.length - 1;
    const storedBlocks = Math.floor(computed / BLOCK);
    expect(computed % BLOCK).toBeGreaterThan(0);
    expect(store.usage().blocks).toBe(storedBlocks + 1);
    expect(store.storedTokens('s1')).toBe(computed);
    const turn2Prompt = [...log, ...randomIds(502, 9, 3, 400)];
    const reference = await greedy(first, turn2Prompt, 's1');
    expect(reference.cached).toBe(computed);

    const restarted = await loadEngine(backend, 'tiny', { ...options, kvStore: store });
    const restored = await greedy(restarted, turn2Prompt, 's1');
    expect(restored.ids).toEqual(reference.ids);
    expect(restored.cached).toBe(computed);
    expect(restarted.stats().kvStore?.restored.blocks).toBe(storedBlocks + 1);
    expect(restarted.stats().kvStore?.restored.tokens).toBe(computed);
    expect(restarted.stats().prefillTokens).toBe(turn2Prompt.length - computed);
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
    // Each: 64 + 40 prompt + 24 generated - 1 computed = 127 tokens, 7 full blocks, of which 4 are the shared
    // ones, and for the two sessions a partial last block of 15 (a stateless request's is not kept).
    expect(store.usage().blocks).toBe(4 + 3 * 3 + 2);
    expect(engine.stats().kvStore?.storedBlocks).toBe(15);
    expect(store.storedTokens('a')).toBe(127);
    expect(store.storedTokens('b')).toBe(127);
    // A deleted session takes what only it needed; the shared prefix stays for the other.
    store.unpin('a');
    expect(store.usage().blocks).toBe(4 + 2 * 3 + 1);
    expect(store.storedTokens('b')).toBe(127);
    await engine.runner.release();
  });

  it("a session's next turn replaces its stored partial block; the block is stored without what its pool block held before", async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const engine = await loadEngine('kernels', 'tiny', { kvStore: store });
    // Every pool block holds something already (as after other sessions' tokens): none of it may be stored.
    const memory = engine.kvMemory;
    if (!(memory instanceof ArrayKvMemory)) throw new Error('the kernels keep their KV pool in an ArrayKvMemory');
    for (const array of [...memory.keys, ...memory.values]) array.fill(0.5);
    const history = randomIds(521, 37, 3, 400);
    const turn1 = await greedy(engine, history, 's');
    await engine.storeKv();
    const log1 = [...history, ...turn1.ids];
    const computed1 = log1.length - 1; // 60: three full blocks and 12 tokens
    expect(store.usage().blocks).toBe(4);
    const tail1 = tailName(engine, log1.slice(0, computed1), 's');
    const bytes = store.read(tail1);
    expect(bytes).toBeDefined();
    const { numLayers, numKvHeads, headDim } = engine.config;
    const perToken = headDim * 4;
    // Per layer, keys then values, each (kv heads, block, head_dim): positions 12..15 of every head are zero.
    let beyond = 0;
    let within = 0;
    for (let part = 0; part < 2 * numLayers; part++)
      for (let h = 0; h < numKvHeads; h++) {
        const head = (part * numKvHeads + h) * BLOCK * perToken;
        for (let i = head; i < head + BLOCK * perToken; i++) {
          if (i < head + 12 * perToken) within += bytes![i] !== 0 ? 1 : 0;
          else beyond += bytes![i] !== 0 ? 1 : 0;
        }
      }
    expect(within).toBeGreaterThan(0);
    expect(beyond).toBe(0);

    const turn2 = await greedy(engine, [...log1, ...randomIds(522, 5, 3, 400)], 's');
    await engine.storeKv();
    const log2 = [...log1, ...randomIds(522, 5, 3, 400), ...turn2.ids];
    expect(store.has(tail1)).toBe(false);
    expect(store.has(tailName(engine, log2.slice(0, log2.length - 1), 's'))).toBe(true);
    expect(store.usage().blocks).toBe(Math.ceil((log2.length - 1) / BLOCK));
    expect(store.storedTokens('s')).toBe(log2.length - 1);
    store.unpin('s');
    expect(store.usage().blocks).toBe(0);
    await engine.runner.release();
  });

  it("a session's partial block is its own: another session or a stateless request with the same tokens restores only the full blocks", async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const history = randomIds(530, 40, 3, 400);
    const first = await loadEngine('kernels', 'tiny', { kvStore: store });
    const turn1 = await greedy(first, history, 'mine');
    await first.storeKv();
    await first.runner.release();
    const log = [...history, ...turn1.ids]; // 63 computed: 3 full blocks and 15 tokens
    const next = [...log, ...randomIds(531, 6, 3, 400)];
    for (const session of [undefined, 'theirs']) {
      const engine = await loadEngine('kernels', 'tiny', { kvStore: store });
      expect((await greedy(engine, next, session)).cached).toBe(3 * BLOCK);
      await engine.runner.release();
    }
    const mine = await loadEngine('kernels', 'tiny', { kvStore: store });
    expect((await greedy(mine, next, 'mine')).cached).toBe(log.length - 1);
    expect(mine.stats().kvStore?.restored.tokens).toBe(log.length - 1);
    await mine.runner.release();
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
    expect(engine.stats().kv.used).toBe(0); // its partial block, held for the writer, went back too
    engine.kv.pool.checkInvariants();
    await engine.runner.release();
  });
  it('a session deleted during its turn leaves nothing in the store', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const engine = await loadEngine('kernels', 'tiny', { kvStore: store });
    const abort = new AbortController();
    const request = { prompt_ids: randomIds(507, 80, 3, 400), max_tokens: 200, temperature: 0, ignore_eos: true };
    let tokens = 0;
    for await (const event of engine.generate(request, { session: 'doomed', signal: abort.signal })) {
      // As the object deletes a session: the turn is cancelled, then the session released.
      if (event.type === 'token' && ++tokens === 5) {
        abort.abort();
        engine.releaseSession('doomed');
      }
    }
    await engine.storeKv();
    expect(store.usage().blocks).toBe(0);
    expect(engine.stats().kv.used).toBe(0);
    await engine.runner.release();
  });

  it('partial blocks held for the writer: at most 8, each given back when written, dropped, forgotten or failed', async () => {
    const shape = { numLayers: 1, numKvHeads: 1, headDim: 4 };
    const pool = new BlockPool(shape, 20, 4);
    const memory = new ArrayKvMemory(shape, 20, 4);
    const store = new MemoryKvBlockStore(MB);
    store.open('identity', 4);
    const persistence = new BlockPersistence(pool, memory, store);
    for (let i = 0; i < 12; i++) {
      const block = pool.allocate()!;
      persistence.enqueue([], `s${i}`, true, { hash: `t${i}+1`, block });
      pool.release(block); // the session's own reference: the writer's is left
    }
    expect(pool.stats().used).toBe(8); // the four oldest were let go unwritten
    persistence.forget('s11');
    expect(pool.stats().used).toBe(7);
    await persistence.flush();
    expect(pool.stats().used).toBe(0);
    expect(store.usage().blocks).toBe(7);
    expect(store.storedTokens('s5')).toBe(1);
    expect(store.storedTokens('s2')).toBe(0);

    const full = new MemoryKvBlockStore(MB);
    full.open('identity', 4);
    full.write = () => {
      throw new Error('SQLITE_FULL');
    };
    const failing = new BlockPersistence(pool, memory, full);
    const block = pool.allocate()!;
    failing.enqueue([], 's', true, { hash: 'u+2', block });
    pool.release(block);
    await failing.flush();
    expect(failing.counters.failedChains).toBe(1);
    expect(pool.stats().used).toBe(0);
    pool.checkInvariants();
  });
});

describe('stored blocks that cannot be trusted', () => {
  it('a damaged block ends the restored chain there; the rest is prefilled and the output is unchanged', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const prompt = randomIds(503, 120, 3, 400);
    const { want, chain } = await storedBy(store, prompt);
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

  it('a storage error while restoring is a miss: the rest is prefilled, the request and its neighbours unharmed', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const prompt = randomIds(508, 120, 3, 400);
    const { want } = await storedBy(store, prompt);
    let reads = 0;
    const read = store.read.bind(store);
    store.read = (hash) => {
      if (++reads === 3) throw new Error('SQLITE_IOERR');
      return read(hash);
    };
    const second = await loadEngine('kernels', 'tiny', { kvStore: store });
    const [got, other] = await Promise.all([greedy(second, prompt), greedy(second, randomIds(509, 30, 3, 400))]);
    expect(got.ids).toEqual(want.ids);
    expect(got.cached).toBe(2 * BLOCK);
    expect(other.ids).toHaveLength(24);
    expect(second.stats().kvStore?.restored.failed).toBe(1);
    second.kv.pool.checkInvariants();
  });

  it('blocks from another weights file, dtype or KV dtype are never restored (the store drops them)', async () => {
    const store = new MemoryKvBlockStore(64 * MB);
    const prompt = randomIds(504, 80, 3, 400);
    await storedBy(store, prompt);
    expect(store.usage().blocks).toBeGreaterThan(0);
    for (const other of [{ dtype: 'int8' as const }, { kvDtype: 'fp16' as const }]) {
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

describe('MemoryKvBlockStore', () => {
  for (const c of KV_STORE_CASES) {
    it(c.name, () => {
      const store = new MemoryKvBlockStore(c.budget);
      store.open('identity', 16);
      c.run(store);
    });
  }

  it('checks every read against the checksum, and drops a block that fails it', () => {
    const store = new MemoryKvBlockStore(4000);
    store.open('id', 16);
    const bytes = new Uint8Array(1000).fill(7);
    store.write({ hash: 'k1', parent: '', bytes });
    store.corrupt('k1');
    expect(store.read('k1')).toBeUndefined();
    expect(store.has('k1')).toBe(false);
    expect(store.usage().discarded).toBe(1);
    const flipped = bytes.slice();
    flipped[999] ^= 1;
    expect(blockChecksum(flipped)).not.toBe(blockChecksum(bytes));
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

/** A first engine (kernels) answers `prompt` greedily and stores its blocks: what it said, and the prompt's chain. */
async function storedBy(
  store: MemoryKvBlockStore,
  prompt: number[],
): Promise<{ want: { ids: number[] }; chain: string[] }> {
  const first = await loadEngine('kernels', 'tiny', { kvStore: store });
  const want = await greedy(first, prompt);
  await first.storeKv();
  const chain = chainOf(first, prompt);
  await first.runner.release();
  return { want, chain };
}

// Durable KV blocks on WebGPU, where the pool's bytes live on the device: a finished sequence's blocks
// are read back from the device into the store, and a fresh engine writes them onto its device instead
// of prefilling, with the same greedy tokens as the engine that computed them.
import { describe, expect, it } from 'vitest';
import { MemoryKvBlockStore } from '../../src/engine/kv/memory-block-store.js';
import { collect, loadEngine, randomIds } from '../helpers/engines.js';
import { gpu, skipNote } from './gpu.js';

describe.skipIf(!gpu)(`KV block store on WebGPU${skipNote}`, () => {
  it('restores device blocks from the store into a fresh engine', async () => {
    const store = new MemoryKvBlockStore(16 * 2 ** 20);
    const prompt = randomIds(61, 70, 3, 512);
    const request = { prompt_ids: prompt, max_tokens: 12, temperature: 0, ignore_eos: true };
    const first = await loadEngine('webgpu', 'tiny', { kvStore: store });
    const want = await collect(first, request);
    await first.storeKv();
    const blocks = Math.floor((prompt.length + 11) / 16);
    expect(store.usage().blocks).toBe(blocks);
    await first.runner.release();

    const second = await loadEngine('webgpu', 'tiny', { kvStore: store });
    const got = await collect(second, request);
    expect(got.done.metrics.cachedTokens).toBe(Math.floor((prompt.length - 1) / 16) * 16);
    expect(got.done.tokenIds).toEqual(want.done.tokenIds);
    expect(second.stats().kvStore?.restored.blocks).toBe(Math.floor((prompt.length - 1) / 16));
    await second.runner.release();
  });
});

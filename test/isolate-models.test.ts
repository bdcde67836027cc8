// Engines sharing an isolate (Durable Objects of one class in one Workers isolate): the model is loaded
// once for all of them, each has its own KV pool in the same linear memory, the pools are sized so that
// SHARD_COUNT engines fit the budget together, and a holder that goes away gives its pool back without
// unloading what the others use. Tokens are the ones an engine alone computes, bit for bit.
import { describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine, type EngineOptions } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { KernelRunner } from '../src/engine/runners/wasm/kernel-runner.js';
import { IsolateModels } from '../src/engine/runners/isolate-models.js';
import { POOL_FLOOR_BLOCKS } from '../src/engine/runners/isolate-pool.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect, modelDir } from './helpers/engines.js';

const MiB = 2 ** 20;
const source = () => directorySource(modelDir('tiny'));
const base: EngineOptions = { dtype: 'q4', kvCacheBytes: 2 * MiB, maxBatchSize: 8 };

async function shared(models: IsolateModels, holder: string, engines: number, extra: EngineOptions = {}) {
  return Engine.load(await nodeRuntime('kernels'), source(), {
    ...base,
    ...extra,
    isolate: { models, holder, source: 'dir:tiny', engines },
  });
}

const requests = [
  { prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true },
  { prompt: 'The sea', max_tokens: 24, temperature: 0.9, top_p: 0.9, seed: 7, ignore_eos: true },
  { prompt: 'A dog', max_tokens: 24, temperature: 1.1, top_k: 20, seed: 3, ignore_eos: true },
];

describe('engines of one isolate', () => {
  it('load the weights once and compute the tokens an engine alone computes, streaming at the same time', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const expected = [];
    for (const r of requests) expected.push((await collect(alone, r)).done.tokenIds);
    await alone.runner.release();

    const models = new IsolateModels();
    const engines = await Promise.all(['a', 'b', 'c'].map((holder) => shared(models, holder, 3)));
    const runners = engines.map((e) => e.runner as KernelRunner);
    expect(runners[1].memory).toBe(runners[0].memory);
    expect(runners[2].weights).toBe(runners[0].weights);
    expect(models.snapshot().models).toEqual([{ key: expect.any(String), holders: 3 }]);
    // Every engine runs every request, all nine streams at once: passes of different engines interleave.
    const runs = engines.flatMap((engine) => requests.map((r) => collect(engine, r)));
    const got = (await Promise.all(runs)).map((r) => r.done.tokenIds);
    expect(got).toEqual([...expected, ...expected, ...expected]);
  });

  it('counts the weights once, and a pool per engine sized so that `engines` of them fit the budget', async () => {
    const probe = new IsolateModels();
    const one = await shared(probe, 'probe', 1);
    const withOne = probe.countedBytes() - one.stats().kv.bytesTotal;
    probe.release('probe');
    const model = probe.countedBytes(); // weights, scratch, code and tokenizer: held with no engine left
    const perEngine = withOne - model;
    // Room for the model, four engines' own parts and a third of the pools they ask for.
    const budget = model + 4 * perEngine + Math.floor((4 * 2 * MiB) / 3);
    const models = new IsolateModels();
    const engines = [];
    for (const holder of ['a', 'b', 'c', 'd'])
      engines.push(await shared(models, holder, 4, { memoryBudgetBytes: budget }));
    const pools = engines.map((e) => e.stats().kv.bytesTotal);
    // Equal shares, to a block (each share is rounded down to whole blocks; what is left goes to the next).
    const block = engines[0].stats().kv.bytesTotal / engines[0].kv.pool.numBlocks;
    expect(Math.max(...pools) - Math.min(...pools)).toBeLessThanOrEqual(block);
    expect(pools[0]).toBeLessThan(2 * MiB);
    expect(pools[0]).toBeGreaterThan(0.6 * MiB);
    expect(models.countedBytes()).toBeLessThanOrEqual(budget);
    // A fifth engine finds no room for even the floor, and is refused naming what the isolate holds.
    const fifth = shared(models, 'e', 4, { memoryBudgetBytes: budget });
    await expect(fifth).rejects.toThrow(InvalidRequestError);
    await expect(shared(models, 'e', 4, { memoryBudgetBytes: budget })).rejects.toThrow(
      /the isolate has no room for another engine: it holds [\d.]+ MiB \(weights [\d.]+ MiB \+ scratch/,
    );
    expect(models.snapshot().models[0].holders).toBe(4);
    // The four still serve.
    const tokens = await Promise.all(engines.map((e) => collect(e, requests[0])));
    expect(new Set(tokens.map((t) => t.done.tokenIds.join()))).toHaveProperty('size', 1);
  });

  it('a holder that goes away gives its pool back; the others keep streaming; its next engine reuses the bytes', async () => {
    const models = new IsolateModels();
    const a = await shared(models, 'a', 2);
    const b = await shared(models, 'b', 2);
    const expected = (await collect(b, requests[1])).done.tokenIds;
    const memory = (b.runner as KernelRunner).memory;
    const used = memory.allocated;
    const streaming = collect(b, requests[1]);
    models.release('a');
    expect(memory.allocated).toBeLessThan(used);
    await expect(collect(a, requests[0])).rejects.toThrow(/released/);
    expect((await streaming).done.tokenIds).toEqual(expected);
    // The same object's next instance: the freed bytes are taken again, the memory does not grow.
    const bytes = memory.bytes;
    const again = await shared(models, 'a', 2);
    expect(memory.bytes).toBe(bytes);
    expect((await collect(again, requests[1])).done.tokenIds).toEqual(expected);
  });

  it('a replaced instance of the same holder is stopped before its successor takes a pool', async () => {
    const models = new IsolateModels();
    const first = await shared(models, 'x', 1);
    const second = await shared(models, 'x', 1);
    expect(models.snapshot().models[0].holders).toBe(1);
    await expect(collect(first, requests[0])).rejects.toThrow(/released/);
    expect((await collect(second, requests[0])).done.finishReason).toBe('length');
  });

  it('refuses a pool below the floor of four blocks', async () => {
    const models = new IsolateModels();
    const one = await shared(models, 'a', 1);
    const blockBytes = one.stats().kv.bytesTotal / one.kv.pool.numBlocks;
    const fixed = models.countedBytes() - one.stats().kv.bytesTotal;
    models.release('a');
    const tight = fixed + (POOL_FLOOR_BLOCKS - 1) * blockBytes;
    await expect(shared(new IsolateModels(), 'a', 1, { memoryBudgetBytes: tight })).rejects.toMatchObject({
      code: 'model_too_large',
    });
  });
});

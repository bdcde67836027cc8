// MEMORY_BUDGET_MB on wasm stands for a Workers isolate: besides the runner's weights, scratch and KV pool it
// counts what the isolate holds around them (tokenizer, streams, grammars), as measured in workerd
// (scripts/bench/edge-memory.ts). A model that fits only without that part is refused, naming it.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { parseModelConfig } from '../src/engine/model/config.js';
import { isolateFootprint, MemoryBudget } from '../src/engine/runners/memory-budget.js';
import { directorySource } from '../src/sources/directory-source.js';
import { modelDir } from './helpers/engines.js';

const MiB = 2 ** 20;

describe('the isolate part of the memory budget', () => {
  it('grows with the vocabulary and the streams; 128 MiB holds bench-135m q4 at SmolLM2-135M size', () => {
    const smol = isolateFootprint(49_152, 16).bytes;
    expect(isolateFootprint(512, 16).bytes).toBeLessThan(smol);
    expect(isolateFootprint(49_152, 1).bytes).toBeLessThan(smol);
    // What bench-135m q4 measured in workerd with a 49,152-token tokenizer (docs/models.md): loaded, under
    // 16 streams, and once a grammar was compiled; the part must cover each.
    for (const measured of [8.2, 9.4, 13.3]) expect(smol).toBeGreaterThanOrEqual(measured * MiB);
    expect(smol).toBeLessThan(16 * MiB);
  });

  it('is counted in every check and named in the refusal', () => {
    const config = parseModelConfig(JSON.parse(readFileSync(join(modelDir('tiny'), 'config.json'), 'utf8')));
    const part = isolateFootprint(512, 4);
    const weights = { label: 'weights', bytes: 10 * MiB };
    new MemoryBudget(config, MiB, 11 * MiB).check([weights]);
    const budget = new MemoryBudget(config, MiB, 11 * MiB, [part]);
    expect(() => budget.check([weights])).toThrow(InvalidRequestError);
    expect(() => budget.check([weights])).toThrow(
      /weights 10\.0 MiB \+ isolate besides the runner \(JS heap, buffers, xgrammar\) \d+\.\d MiB \+ KV cache 1\.0 MiB/,
    );
  });

  it('a model that fits the budget only without it is refused on wasm, and loads on cpu (not an isolate)', async () => {
    const source = directorySource(modelDir('tiny'));
    const limits = { kvCacheBytes: 2 * MiB, maxBatchSize: 16 };
    const engine = await Engine.load(await nodeRuntime('kernels'), source, limits);
    const linear = engine.stats().wasmMemoryBytes!;
    await engine.runner.release();
    // Room for the kernels' whole linear memory, not for the isolate's part beside it.
    const budget = linear + MiB;
    await expect(
      Engine.load(await nodeRuntime('kernels'), source, { ...limits, memoryBudgetBytes: budget }),
    ).rejects.toThrow(/isolate besides the runner/);
    const roomy = linear + isolateFootprint(512, 16).bytes + MiB;
    const fits = await Engine.load(await nodeRuntime('kernels'), source, { ...limits, memoryBudgetBytes: roomy });
    await fits.runner.release();
    const cpu = await Engine.load(await nodeRuntime('cpu'), source, { ...limits, memoryBudgetBytes: budget });
    await cpu.runner.release();
  });
});

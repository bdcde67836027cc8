// A vocabulary too large for the head's isolate, split by rows over the pipeline stages: each stage holds its
// rows of the embedding and output projection beside its layers, the head none of the weights. Through them
// the engine computes the tokens and logits of one process to the last bit (each logit is the same dot
// product, computed by the same kernels), ONNX and GGUF alike; a stage that restarts is recomputed.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine, type EngineOptions } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { IsolateModels } from '../src/engine/runners/isolate-models.js';
import { isolateFootprint } from '../src/engine/runners/memory-budget.js';
import { LocalStageLink } from '../src/engine/runners/stages/local-stage-link.js';
import { splitVocabulary } from '../src/engine/runners/stages/stage-plan.js';
import { StageServer, type StageModel } from '../src/engine/runners/stages/stage-server.js';
import type { ModelSource } from '../src/engine/model/model-files.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect, modelDir } from './helpers/engines.js';
import { writeGgufFolder } from './helpers/gguf-folder.js';

const MiB = 2 ** 20;
const base: EngineOptions = { dtype: 'q4', kvCacheBytes: 2 * MiB, maxBatchSize: 8 };

async function stagedEngine(
  source: () => ModelSource,
  model: string,
  options: EngineOptions,
  vocab: 'head' | 'stages' | 'auto' = 'stages',
  stages = 2,
) {
  const runtime = await nodeRuntime('kernels');
  const models = new IsolateModels<StageModel>();
  const server = (i: number) =>
    new StageServer({
      runtime,
      source: source(),
      model,
      memoryBudgetBytes: undefined,
      isolate: { models, holder: `s${i}` },
    });
  const links = Array.from({ length: stages }, (_, i) => new LocalStageLink(server(i)));
  const engine = await Engine.load(runtime, source(), {
    ...options,
    pipeline: { stages, model, links, kvDtype: 'fp32', vocab },
  });
  return { engine, links, server };
}

const tiny = () => directorySource(modelDir('tiny'));

const requests = [
  { prompt: 'Once upon a time', max_tokens: 20, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3 },
  { prompt: 'The sea was calm', max_tokens: 16, temperature: 0.9, top_p: 0.9, seed: 7, ignore_eos: true },
  // Verification asks for several positions' logits a row.
  {
    prompt: 'a b a b a b a b a b',
    max_tokens: 16,
    temperature: 0,
    ignore_eos: true,
    speculative: { method: 'ngram' as const, num_tokens: 3 },
  },
];

async function expectSameAsOneProcess(source: () => ModelSource, model: string, options: EngineOptions) {
  const alone = await Engine.load(await nodeRuntime('kernels'), source(), options);
  const expected = await Promise.all(requests.map((r) => collect(alone, r)));
  const { engine } = await stagedEngine(source, model, options);
  const got = await Promise.all(requests.map((r) => collect(engine, r)));
  expect(got.map((r) => r.done.tokenIds)).toEqual(expected.map((r) => r.done.tokenIds));
  expect(got.map((r) => r.tokens.map((t) => [t.logprob, t.topLogprobs]))).toEqual(
    expected.map((r) => r.tokens.map((t) => [t.logprob, t.topLogprobs])),
  );
  return engine;
}

describe('splitVocabulary', () => {
  it('gives every stage the ends and a near-equal run of the vocabulary, end to end', () => {
    const spans = splitVocabulary(
      [
        { from: 0, to: 2, ends: false },
        { from: 2, to: 3, ends: false },
        { from: 3, to: 5, ends: false },
      ],
      128_256,
    );
    expect(spans.map((s) => [s.from, s.to, s.ends])).toEqual([
      [0, 2, true],
      [2, 3, true],
      [3, 5, true],
    ]);
    expect(spans.map((s) => s.vocab)).toEqual([
      { from: 0, to: 42_752 },
      { from: 42_752, to: 85_504 },
      { from: 85_504, to: 128_256 },
    ]);
  });
});

describe('a vocabulary split over the stages', () => {
  let ggufRoot: string | undefined;
  afterAll(() => ggufRoot && rmSync(ggufRoot, { recursive: true, force: true }));

  it('ONNX: the tokens and logprobs of one process, bit for bit; the head holds no weight', async () => {
    const engine = await expectSameAsOneProcess(tiny, 'tiny', base);
    const stages = engine.runner.stats().stages!;
    expect(stages.every((s) => s.hops > 0 && s.weightBytes > 0)).toBe(true);
    expect(engine.runner.stats().wasmMemoryBytes ?? 0).toBe(0);
  });

  it('GGUF: the same, each stage reading only its rows of the table', async () => {
    ggufRoot = mkdtempSync(join(tmpdir(), 'edge-infer-vocab-'));
    const dir = join(ggufRoot, 'gguf');
    await writeGgufFolder(dir);
    await expectSameAsOneProcess(() => directorySource(dir), 'gguf', { kvCacheBytes: 2 * MiB, maxBatchSize: 8 });
  });

  it('each stage holds its share of the table: less than the ends on the head', async () => {
    const onHead = await stagedEngine(tiny, 'tiny', base, 'head');
    const split = await stagedEngine(tiny, 'tiny', base, 'stages');
    const bytes = (e: Engine) => e.runner.stats().stages!.map((s) => s.weightBytes);
    const table = onHead.engine.runner.stats().wasmMemoryBytes ?? 0;
    expect(table).toBeGreaterThan(0);
    for (const [i, b] of bytes(split.engine).entries()) {
      expect(b).toBeGreaterThan(bytes(onHead.engine)[i]);
      expect(b - bytes(onHead.engine)[i]).toBeLessThan(table * 0.6);
    }
  });

  it('auto puts the vocabulary on the stages when the head cannot hold it, and on the head when it can', async () => {
    const footprint = isolateFootprint(512, base.maxBatchSize!).bytes;
    const tight = await stagedEngine(tiny, 'tiny', { ...base, memoryBudgetBytes: footprint + 1024 }, 'auto');
    expect(tight.engine.runner.stats().wasmMemoryBytes ?? 0).toBe(0);
    const roomy = await stagedEngine(tiny, 'tiny', { ...base, memoryBudgetBytes: footprint + 64 * MiB }, 'auto');
    expect(roomy.engine.runner.stats().wasmMemoryBytes).toBeGreaterThan(0);
  });

  it('prompt logprobs are refused with a clear error, and the engine serves on', async () => {
    const { engine } = await stagedEngine(tiny, 'tiny', base);
    const ask = { prompt: 'Once upon a time', max_tokens: 4, prompt_logprobs: 2 };
    expect(() => engine.resolve(ask)).toThrow(InvalidRequestError);
    expect(() => engine.resolve(ask)).toThrow(/split over its pipeline stages/);
    const done = await collect(engine, { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
    expect(done.done.tokenIds).toHaveLength(4);
    expect(engine.stats().kv.used).toBe(0);
  });

  it('a stage that restarts mid-stream is found lost at the next pass: recomputed, the same tokens', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), tiny(), base);
    const r = { prompt: 'Once upon a time there was', max_tokens: 30, temperature: 0, ignore_eos: true };
    const expected = (await collect(alone, r)).done.tokenIds;
    const { engine, links, server } = await stagedEngine(tiny, 'tiny', base);
    const tokens: number[] = [];
    for await (const event of engine.generate(r)) {
      if (event.type !== 'token') break;
      tokens.push(event.tokenId);
      if (tokens.length === 8) {
        links[0].server.close();
        links[0].server = server(0);
      }
    }
    expect(tokens).toEqual(expected);
    expect(engine.stats().kvLosses).toBe(1);
    expect(engine.runner.stats().stages![0].restarts).toBe(1);
    expect(engine.stats().kv.used).toBe(0);
  });
});

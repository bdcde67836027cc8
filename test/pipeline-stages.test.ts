// A model's layers on pipeline stages: the head holds the ends and every block table, each stage its layers
// and their KV blocks under the head's block ids. Through stages the engine computes exactly the tokens
// and logits one process computes (the same kernels on the same rows), in any batch, with prefix caching,
// forks and restores; a stage that restarts loses its KV and the head recomputes, losing nothing else.
import { describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { Engine, type EngineOptions } from '../src/engine/engine.js';
import { IsolateModels } from '../src/engine/runners/isolate-models.js';
import { HEAD_SPAN, layerCosts, planStages } from '../src/engine/runners/stages/stage-plan.js';
import { microBatches } from '../src/engine/runners/stages/micro-batches.js';
import { LocalStageLink } from '../src/engine/runners/stages/local-stage-link.js';
import { StageServer, type StageModel } from '../src/engine/runners/stages/stage-server.js';
import type { ModelSource } from '../src/engine/model/model-files.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect, modelDir } from './helpers/engines.js';
import { parseModelConfig } from '../src/engine/model/config.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const MiB = 2 ** 20;
const source = () => directorySource(modelDir('tiny'));
const base: EngineOptions = { dtype: 'q4', kvCacheBytes: 2 * MiB, maxBatchSize: 8 };

async function stageLinks(count: number, models = new IsolateModels<StageModel>()) {
  const runtime = await nodeRuntime('kernels');
  const server = (i: number, isolate = models) =>
    new StageServer({
      runtime,
      source: source(),
      model: 'tiny',
      memoryBudgetBytes: undefined,
      isolate: { models: isolate, holder: `stage-${i}` },
    });
  const links = Array.from({ length: count }, (_, i) => new LocalStageLink(server(i)));
  /**
   * Stage `i`'s process restarts: a new server in a new isolate (its own memory, so no byte of the old pool
   * survives to hide a pass that reads it), an empty pool, another epoch.
   */
  const restart = (i: number) => {
    links[i].server.close();
    links[i].server = server(i, new IsolateModels<StageModel>());
  };
  return { links, restart };
}

async function staged(count: number, extra: EngineOptions = {}) {
  const { links, restart } = await stageLinks(count);
  const engine = await Engine.load(await nodeRuntime('kernels'), source(), {
    ...base,
    ...extra,
    pipeline: { stages: count, model: 'tiny', links, kvDtype: extra.kvDtype ?? 'fp32' },
  });
  return { engine, links, restart };
}

/**
 * Each link's steps answer a millisecond later, as a stage a hop away does, and the most steps outstanding at
 * once over all stages is counted.
 */
function timedLinks(links: LocalStageLink[]): { most: number } {
  const calls = { now: 0, most: 0 };
  for (const link of links) {
    const step = link.step.bind(link);
    link.step = async (message) => {
      calls.most = Math.max(calls.most, ++calls.now);
      try {
        await new Promise((resolve) => setTimeout(resolve, 1));
        return await step(message);
      } finally {
        calls.now--;
      }
    };
  }
  return calls;
}

/** Every choice's token ids of an n > 1 request, by index. */
async function choices(engine: Engine, request: Parameters<Engine['generate']>[0]): Promise<number[][]> {
  const out: number[][] = [];
  for await (const event of engine.generate(request)) if (event.type === 'done') out[event.index] = event.tokenIds;
  return out;
}

const requests = [
  { prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true },
  {
    prompt: 'The sea was calm and the boats were out',
    max_tokens: 20,
    temperature: 0.9,
    top_p: 0.9,
    seed: 7,
    ignore_eos: true,
  },
  {
    prompt: 'A dog',
    max_tokens: 24,
    temperature: 1.1,
    top_k: 20,
    seed: 3,
    ignore_eos: true,
    logprobs: true,
    top_logprobs: 3,
  },
];

describe('planStages', () => {
  it('splits the layers into contiguous ranges, each non-empty, the largest as small as can be', () => {
    const spans = planStages(4, new Array(30).fill(1));
    expect(spans[0].from).toBe(0);
    expect(spans.at(-1)!.to).toBe(30);
    for (let i = 1; i < spans.length; i++) expect(spans[i].from).toBe(spans[i - 1].to);
    expect(Math.max(...spans.map((s) => s.to - s.from))).toBe(8);
    // Of the splits as good, an even one: 16 layers on 6 stages is not 1 + 5 x 3.
    const six = planStages(6, new Array(16).fill(1)).map((s) => s.to - s.from);
    expect(Math.max(...six) - Math.min(...six)).toBe(1);
    expect(spans.every((s) => !s.ends && s.to > s.from)).toBe(true);
    // Uneven costs: the heavy layer gets a stage to itself.
    expect(planStages(2, [1, 1, 1, 5])).toEqual([
      { from: 0, to: 3, ends: false },
      { from: 3, to: 4, ends: false },
    ]);
    expect(() => planStages(3, [1, 1])).toThrow(/at least 3 layers/);
    expect(HEAD_SPAN).toEqual({ from: 0, to: 0, ends: true });
  });

  it('costs each layer its weights (by the file bytes per parameter) and its share of the KV pool', () => {
    const config = parseModelConfig(JSON.parse(readFileSync(join(modelDir('tiny'), 'config.json'), 'utf8')), {});
    const [a, b] = layerCosts(config, 1_000_000, 2 * MiB);
    expect(a).toBe(b);
    expect(a).toBeGreaterThan(MiB); // half the pool each
    expect(layerCosts(config, 2_000_000, 0)[0]).toBeCloseTo(2 * layerCosts(config, 1_000_000, 0)[0], 6);
  });
});

describe('microBatches', () => {
  const rows = (counts: number[]) => counts.map((count, i) => ({ blocks: [i], start: 0, count }));
  const shape = (counts: number[], n: number) => microBatches(rows(counts), n).map((g) => [g.firstToken, g.tokens]);
  it('splits a pass into contiguous runs of rows of about equal tokens, none empty', () => {
    expect(shape(new Array(16).fill(1), 2)).toEqual([
      [0, 8],
      [8, 8],
    ]);
    expect(shape(new Array(16).fill(1), 3)).toEqual([
      [0, 5],
      [5, 6],
      [11, 5],
    ]);
    // A prefill chunk weighs what it feeds.
    expect(shape([100, 1, 1, 1], 2)).toEqual([
      [0, 100],
      [100, 3],
    ]);
    expect(shape([1, 1, 1, 100], 2)).toEqual([
      [0, 3],
      [3, 100],
    ]);
    expect(microBatches(rows([3, 4]), 2).map((g) => g.wire.map((r) => r.blocks[0]))).toEqual([[0], [1]]);
  });
});

describe('a model on pipeline stages', () => {
  it('computes the tokens and logprobs of one process, token for token, in one batch', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const expected = await Promise.all(requests.map((r) => collect(alone, r)));
    const { engine } = await staged(2);
    const got = await Promise.all(requests.map((r) => collect(engine, r)));
    expect(got.map((r) => r.done.tokenIds)).toEqual(expected.map((r) => r.done.tokenIds));
    // Logprobs are computed from the logits: equal to the last bit.
    expect(got.map((r) => r.tokens.map((t) => t.logprob))).toEqual(expected.map((r) => r.tokens.map((t) => t.logprob)));
    const stats = engine.runner.stats().stages!;
    expect(stats.map((s) => s.layers)).toEqual([
      { from: 0, to: 1 },
      { from: 1, to: 2 },
    ]);
    expect(stats.every((s) => s.hops > 0 && s.weightBytes > 0 && s.kvBytes === MiB)).toBe(true);
  });

  it("released, the head closes every stage's pool; a late close leaves a stage opened since", async () => {
    const models = new IsolateModels<StageModel>();
    const { links } = await stageLinks(2, models);
    const runtime = await nodeRuntime('kernels');
    const load = () =>
      Engine.load(runtime, source(), { ...base, pipeline: { stages: 2, model: 'tiny', links, kvDtype: 'fp32' } });
    const pools = () => models.counted().filter((p) => p.label === 'KV pool').length;
    const first = await load();
    await collect(first, requests[0]);
    const epochs = links.map((link) => link.server.epoch!);
    expect(pools()).toBe(2);
    await first.runner.release();
    expect(links.map((link) => link.server.epoch)).toEqual([undefined, undefined]);
    expect(pools()).toBe(0);
    // A head's close that arrives after another head opened the stage again names the old epoch: no effect.
    const second = await load();
    await links[0].close(epochs[0]);
    expect(links[0].server.epoch).toBeDefined();
    expect(pools()).toBe(2);
    expect((await collect(second, requests[0])).done.finishReason).toBe('length');
  });

  it('runs a batched pass in micro-batches, one per stage, with the tokens of one batch', async () => {
    const pipeline = { stages: 2, model: 'tiny', kvDtype: 'fp32' as const, inFlight: 1 };
    const engine = await Engine.load(await nodeRuntime('kernels'), source(), {
      ...base,
      pipeline: { ...pipeline, links: (await stageLinks(2)).links, microBatches: 2 },
    });
    const one = await Engine.load(await nodeRuntime('kernels'), source(), {
      ...base,
      pipeline: { ...pipeline, links: (await stageLinks(2)).links },
    });
    const a = await Promise.all(requests.map((r) => collect(engine, r)));
    const b = await Promise.all(requests.map((r) => collect(one, r)));
    expect(a.map((r) => r.done.tokenIds)).toEqual(b.map((r) => r.done.tokenIds));
    // Three rows in most passes: two messages a pass to each stage, against one.
    const hops = (e: Engine) => e.runner.stats().stages![0].hops;
    expect(hops(engine)).toBeGreaterThan(1.5 * engine.stats().steps);
    expect(hops(one)).toBe(one.stats().steps);
  });

  it('keeps a pass in flight per stage, each over its own sequences: the tokens and logprobs of one process', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const many = Array.from({ length: 8 }, (_, i) => ({ ...requests[i % 3], seed: 100 + i }));
    const expected = await Promise.all(many.map((r) => collect(alone, r)));
    const run = async (inFlight: number) => {
      const { links } = await stageLinks(2);
      const calls = timedLinks(links);
      const engine = await Engine.load(await nodeRuntime('kernels'), source(), {
        ...base,
        pipeline: { stages: 2, model: 'tiny', links, kvDtype: 'fp32', inFlight },
      });
      const got = await Promise.all(many.map((r) => collect(engine, r)));
      expect(got.map((r) => r.done.tokenIds)).toEqual(expected.map((r) => r.done.tokenIds));
      expect(got.map((r) => r.tokens.map((t) => t.logprob))).toEqual(
        expected.map((r) => r.tokens.map((t) => t.logprob)),
      );
      expect(engine.stats().kv.used).toBe(0);
      return calls.most;
    };
    // Two passes at once (stage 1 takes the next while stage 2 holds the one before it), or three, one waiting.
    expect(await run(2)).toBe(2);
    expect(await run(3)).toBe(3);
    expect(await run(1)).toBe(1);
  });

  it("two passes in flight: the first's logits, read after the second reused the head's scratch, are its own", async () => {
    /** One row of `engine`'s: a prompt's tokens, its blocks reserved, logits after its last two. */
    const row = (engine: Engine, prompt: string) => {
      const tokens = engine.tokenizer.encode(prompt);
      const kv = engine.kv.create();
      engine.kv.reserve(kv, tokens.length);
      return [{ kv, tokens, logits: 2 }];
    };
    const { engine } = await staged(2);
    const a = row(engine, 'Once upon a time');
    const [first, second] = await Promise.all([
      engine.runner.forward(a),
      engine.runner.forward(row(engine, 'The sea was calm')),
    ]);
    // Read in the order that finds the first pass's scratch reused: recomputed from its hidden states.
    const secondLast = second.last(0).slice();
    const late = { last: first.last(0), before: first.at(0, a[0].tokens.length - 2) };
    const { engine: solo } = await staged(2);
    const alone = await solo.runner.forward(row(solo, 'Once upon a time'));
    expect(late.before).toEqual(alone.at(0, a[0].tokens.length - 2).slice());
    expect(late.last).toEqual(alone.last(0).slice());
    expect(secondLast).not.toEqual(late.last);
  });

  it('a stage that restarts under passes in flight is one loss, recomputed to the same tokens', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const many = Array.from({ length: 6 }, (_, i) => ({ ...requests[i % 3], max_tokens: 30, seed: 200 + i }));
    const expected = await Promise.all(many.map((r) => collect(alone, r)));
    const { engine, links, restart } = await staged(2);
    timedLinks(links);
    let tokens = 0;
    const got = await Promise.all(
      many.map(async (r) => {
        const out: number[] = [];
        for await (const event of engine.generate(r)) {
          if (event.type !== 'token') continue;
          out.push(event.tokenId);
          if (++tokens === 40) restart(1);
        }
        return out;
      }),
    );
    expect(got).toEqual(expected.map((r) => r.done.tokenIds));
    expect(engine.stats().kvLosses).toBe(1);
    expect(engine.runner.stats().stages!.map((s) => s.restarts)).toEqual([0, 1]);
    expect(engine.stats().kv.used).toBe(0);
  });

  it('shares prefixes and forks copy-on-write across stages: n > 1 and a repeated prompt equal one process', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const { engine } = await staged(2);
    // Full blocks cached, the last partial block shared by the forks until each writes into it.
    const prompt = 'Once upon a time there was a little girl who lived in a village near the forest';
    const forked = { prompt, max_tokens: 12, n: 3, temperature: 1, seed: 11, ignore_eos: true };
    expect(await choices(engine, forked)).toEqual(await choices(alone, forked));
    const again = await collect(engine, { prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    expect(again.done.metrics.cachedTokens).toBeGreaterThan(0);
    expect(again.done.tokenIds).toEqual(
      (await collect(alone, { prompt, max_tokens: 8, temperature: 0, ignore_eos: true })).done.tokenIds,
    );
    expect(alone.stats().copyOnWrites).toBeGreaterThan(0);
    expect(engine.stats().copyOnWrites).toBe(alone.stats().copyOnWrites);
  });

  it('a stage that restarts mid-stream loses its KV: the head recomputes and the tokens are the same', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const r = { prompt: 'Once upon a time there was', max_tokens: 40, temperature: 0, ignore_eos: true };
    const expected = (await collect(alone, r)).done.tokenIds;
    const { engine, restart } = await staged(2);
    const tokens: number[] = [];
    for await (const event of engine.generate(r)) {
      if (event.type !== 'token') break;
      tokens.push(event.tokenId);
      if (tokens.length === 10) restart(1);
    }
    expect(tokens).toEqual(expected);
    expect(engine.stats().kvLosses).toBe(1);
    expect(engine.runner.stats().stages![1].restarts).toBe(1);
    expect(engine.stats().kv.used).toBe(0);
  });

  it('every stage restarting at once (wrangler dev evicting idle ones) is one loss, not a failure', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const r = { prompt: 'Once upon a time there was', max_tokens: 24, temperature: 0, ignore_eos: true };
    const expected = (await collect(alone, r)).done.tokenIds;
    const { engine, links, restart } = await staged(2);
    const tokens: number[] = [];
    for await (const event of engine.generate(r)) {
      if (event.type !== 'token') break;
      tokens.push(event.tokenId);
      if (tokens.length === 8) for (const i of links.keys()) restart(i);
    }
    expect(tokens).toEqual(expected);
    // The pass that met the first lost stage asked the other, and reloaded both at once: one recompute, where
    // each pass finding the next lost stage took one per stage (three of them, on 3 stages, failed the request).
    expect(engine.stats().kvLosses).toBe(1);
    expect(engine.runner.stats().stages!.map((s) => s.restarts)).toEqual([1, 1]);
  });

  it('a stage that does not fit its budget refuses, naming its terms: the head does not load', async () => {
    const runtime = await nodeRuntime('kernels');
    const links = [0, 1].map(
      (i) =>
        new LocalStageLink(
          new StageServer({
            runtime,
            source: source(),
            model: 'tiny',
            memoryBudgetBytes: MiB, // less than a stage's KV share (1 MiB) and the isolate's code
            isolate: { models: new IsolateModels<StageModel>(), holder: `stage-${i}` },
          }),
        ),
    );
    const load = Engine.load(runtime, source(), {
      ...base,
      pipeline: { stages: 2, model: 'tiny', links, kvDtype: 'fp32' },
    });
    await expect(load).rejects.toMatchObject({
      code: 'model_too_large',
      message: expect.stringMatching(/KV cache 1\.0 MiB/),
    });
    // A stage serving another model is refused by name.
    const other = await stageLinks(2);
    await expect(
      Engine.load(runtime, source(), {
        ...base,
        pipeline: { stages: 2, model: 'other', links: other.links, kvDtype: 'fp32' },
      }),
    ).rejects.toMatchObject({ param: 'PIPELINE_STAGES', message: expect.stringMatching(/serves "other"/) });
  });

  it("a second shard's stage object in a full stage isolate is refused, not run past the budget", async () => {
    const runtime = await nodeRuntime('kernels');
    // The servers stay referenced to the end: the registry frees a holding once its server is collected, so a
    // dropped first server could be collected (and its pool released) before the second asks for room.
    const servers: StageServer[] = [];
    const open = (models: IsolateModels<StageModel>, holder: string, memoryBudgetBytes?: number) => {
      const server = new StageServer({
        runtime,
        source: source(),
        model: 'tiny',
        memoryBudgetBytes,
        isolate: { models, holder },
      });
      servers.push(server);
      return server.open({
        model: 'tiny',
        dtype: 'q4',
        span: { from: 1, to: 2, ends: false },
        numBlocks: 64,
        kvDtype: 'fp32',
        limits: {
          kvCacheBytes: 2 * MiB,
          blockSize: 16,
          maxBatchSize: 8,
          maxTokensPerStep: 512,
          kvDtype: 'fp32',
          memoryBudgetBytes: undefined,
        },
      });
    };
    const probe = new IsolateModels<StageModel>();
    const one = await open(probe, 'a');
    expect(one.kvBytes).toBe(64 * 16 * 256); // the stage's one layer: 256 B a token at fp32
    const budget = probe.countedBytes() + one.kvBytes / 2;
    const models = new IsolateModels<StageModel>();
    await open(models, 'a', budget);
    await expect(open(models, 'b', budget)).rejects.toMatchObject({
      code: 'model_too_large',
      message: expect.stringMatching(/no room for another KV pool/),
    });
    expect(servers).toHaveLength(3);
  });

  it('reads and restores a block through every stage: the bytes one process stores', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const { engine } = await staged(2);
    const r = {
      prompt: 'one two three four five six seven eight nine ten eleven twelve',
      max_tokens: 1,
      temperature: 0,
    };
    await collect(alone, r);
    await collect(engine, r);
    const block = 0; // the first request's first block, in both pools
    const want = await alone.kvMemory.readBlock(block);
    const got = await engine.kvMemory.readBlock(block);
    expect(got).toEqual(want);
    // A restore, then a copy of the restored block (a session's tail restored, then copied before its first
    // write), go with the next pass, in that order: the copy holds the restored bytes on every stage.
    engine.kvMemory.writeBlock(200, got);
    engine.kvMemory.copyBlock(200, 201);
    await collect(engine, { prompt: 'x', max_tokens: 1 });
    expect(await engine.kvMemory.readBlock(200)).toEqual(want);
    expect(await engine.kvMemory.readBlock(201)).toEqual(want);
  });

  it('an 8-bit KV pool (KV_DTYPE int8) held by the stages: the tokens, logprobs and stored blocks of one process', async () => {
    const int8 = { ...base, kvDtype: 'int8' as const };
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), int8);
    const expected = await Promise.all(requests.map((r) => collect(alone, r)));
    const { engine } = await staged(2, int8);
    const got = await Promise.all(requests.map((r) => collect(engine, r)));
    expect(got.map((r) => r.done.tokenIds)).toEqual(expected.map((r) => r.done.tokenIds));
    expect(got.map((r) => r.tokens.map((t) => t.logprob))).toEqual(expected.map((r) => r.tokens.map((t) => t.logprob)));
    const { numLayers, numKvHeads, headDim } = alone.config;
    expect(engine.kvMemory.blockBytes).toBe(2 * numLayers * numKvHeads * alone.kv.pool.blockSize * (headDim + 4));
    expect(await engine.kvMemory.readBlock(0)).toEqual(await alone.kvMemory.readBlock(0));
  });

  it('a read that finds a stage restarted fails, and the next pass recomputes: no block of the old stage is kept', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const { engine, restart } = await staged(2);
    const r = { prompt: 'Once upon a time there was', max_tokens: 12, temperature: 0, ignore_eos: true };
    const expected = (await collect(alone, r)).done.tokenIds;
    expect((await collect(engine, r)).done.tokenIds).toEqual(expected);
    restart(0);
    await expect(engine.kvMemory.readBlock(0)).rejects.toThrow(/restarted: block 0 is gone/);
    // The same prompt again: its cached prefix was the old stage's; it is recomputed, not reused.
    expect((await collect(engine, r)).done.tokenIds).toEqual(expected);
    expect(engine.stats().kvLosses).toBe(1);
  });

  it('a call that fails while the stage lives on gives its block commands back, for the retry', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const { engine, links } = await staged(2);
    const r = {
      prompt: 'one two three four five six seven eight nine ten eleven twelve',
      max_tokens: 1,
      temperature: 0,
    };
    await collect(alone, r);
    await collect(engine, r);
    const want = await alone.kvMemory.readBlock(0);
    engine.kvMemory.writeBlock(200, want);
    const step = links[1].step.bind(links[1]);
    let failures = 1;
    links[1].step = (message) => (failures-- > 0 ? Promise.reject(new Error('a dropped call')) : step(message));
    // The pass fails on stage 2 (a pass of one row: that request fails, alone); the restore goes with the next.
    await expect(collect(engine, { prompt: 'x', max_tokens: 2, temperature: 0 })).rejects.toThrow(/a dropped call/);
    expect((await collect(engine, { prompt: 'y', max_tokens: 2, temperature: 0 })).done.tokenIds).toHaveLength(2);
    expect(await engine.kvMemory.readBlock(200)).toEqual(want);
    expect(engine.stats().kvLosses).toBe(0);
  });

  it('a stage lost pass after pass fails those requests, then serves again once it stays up', async () => {
    const alone = await Engine.load(await nodeRuntime('kernels'), source(), base);
    const { engine, links, restart } = await staged(2);
    const r = { prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true };
    const expected = (await collect(alone, r)).done.tokenIds;
    const step = links[1].step.bind(links[1]);
    let restarts = 3;
    links[1].step = async (message) => {
      // The pass brings the stage down: it answers as a new one every time.
      if (restarts-- > 0) restart(1);
      return step(message);
    };
    await expect(collect(engine, r)).rejects.toThrow(/restarted 3 passes in a row/);
    expect(engine.stats().kv.used).toBe(0);
    expect((await collect(engine, r)).done.tokenIds).toEqual(expected);
  });
});

describe('LoRA adapters on pipeline stages', () => {
  const LORA = 'tiny-lora';
  const loraOptions: EngineOptions = { ...base, adapterCacheBytes: MiB };

  /** Two stages of tiny-lora; `stageSource` is what the stages read (the head's folder unless given). */
  async function loraStages(stageSource = () => directorySource(modelDir(LORA))) {
    const runtime = await nodeRuntime('kernels');
    const models = new IsolateModels<StageModel>();
    const links = [0, 1].map(
      (i) =>
        new LocalStageLink(
          new StageServer({
            runtime,
            source: stageSource(),
            model: LORA,
            memoryBudgetBytes: undefined,
            isolate: { models, holder: `stage-${i}` },
          }),
        ),
    );
    const engine = await Engine.load(runtime, directorySource(modelDir(LORA)), {
      ...loraOptions,
      pipeline: { stages: 2, model: LORA, links, kvDtype: 'fp32' },
    });
    return { engine, links };
  }

  /** Each request's tokens and logprobs, all sent at once (one batch), row i with adapters[i] (none: the base). */
  async function batch(engine: Engine, adapters: (string | undefined)[]) {
    const runs = adapters.map(async (name, i) => {
      const adapter = name ? await engine.loadAdapter(name) : undefined;
      const request = { ...requests[i % requests.length], logprobs: true };
      const tokens: number[] = [];
      const logprobs: number[] = [];
      for await (const e of engine.generate(request, { adapter })) {
        if (e.type === 'token') logprobs.push(e.logprob!);
        else tokens.push(...e.tokenIds);
      }
      return { tokens, logprobs };
    });
    return Promise.all(runs);
  }

  it("mixed with base rows in one batch: each row's tokens and logprobs are one process's, to the bit", async () => {
    const names = [undefined, 'all-r16', 'qv-r8', undefined, 'mlp-r4-rs', 'all-r16'];
    const alone = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir(LORA)), loraOptions);
    const expected = await batch(alone, names);
    const { engine, links } = await loraStages();
    const got = await batch(engine, names);
    expect(got).toEqual(expected);
    // The adapters moved their rows: the same request on the base gives other tokens.
    expect(got[1].logprobs).not.toEqual((await batch(alone, [undefined, undefined]))[1].logprobs);
    // Each stage holds its layer's part of an adapter: together what the head holds, no more.
    const all = await engine.loadAdapter('all-r16');
    const held = links.map((l) => l.server.adapters!);
    expect(held.every((h) => h.loaded === 3 && h.bytes > 0)).toBe(true);
    expect(held[0].bytes + held[1].bytes).toBe(
      all.bytes + (await engine.loadAdapter('qv-r8')).bytes + (await engine.loadAdapter('mlp-r4-rs')).bytes,
    );
  });

  it("a stage whose adapter files are not the head's refuses it when a request names it; the rest goes on", async () => {
    const altered = (): ModelSource => {
      const folder = directorySource(modelDir(LORA));
      return {
        ...folder,
        read: async (path) => {
          const bytes = await folder.read(path);
          // The same adapter, one byte more: another SHA-256, as a rollout half done would give.
          return bytes && path === 'adapters/qv-r8/adapter_config.json' ? new Uint8Array([...bytes, 0x20]) : bytes;
        },
        stream: folder.stream?.bind(folder),
        exists: folder.exists?.bind(folder),
      };
    };
    const { engine } = await loraStages(altered);
    // Refused when a request names it (each stage reads it then), before any pass carries it.
    const refused = await engine.loadAdapter('qv-r8').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidRequestError);
    expect(refused).toMatchObject({ code: 'invalid_adapter', param: 'model' });
    expect((refused as Error).message).toMatch(/adapter 'qv-r8': the stage's adapters\/qv-r8\/ is not the head's/);
    // An adapter whose files are the same on every stage loads and runs.
    const same = await engine.loadAdapter('attn-r12');
    let done: number[] = [];
    for await (const e of engine.generate({ ...requests[0], max_tokens: 4 }, { adapter: same }))
      if (e.type === 'done') done = e.tokenIds;
    expect(done).toHaveLength(4);
    expect(engine.stats().kv.used).toBe(0);
    expect((await collect(engine, requests[0])).done.tokenIds).toHaveLength(24);
  });
});

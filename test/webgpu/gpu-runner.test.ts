// The WebGPU runner with the KV cache on the device (GpuRunner: gather / scatter with our kernels,
// ORT inputs from GPU buffers, present.* left on the GPU): greedy tokens equal wasm's, token for token,
// for a batch of sequences of different lengths decoding together, with blocks of 4 tokens so every
// sequence spans partial and full blocks, and through a copy-on-write fork whose shared partial block
// is copied on the device. Then the whole step on the device: logits left on the GPU and sampled there
// (DeviceSampler), seeded: the same tokens as the wasm engine's CPU sampler.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeShaderSource, webGpuRuntimeForNode } from '../../src/backends/ort-webgpu-node.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerationRequest } from '../../src/engine/request.js';
import { DeviceSampler } from '../../src/engine/runners/webgpu/device-sampler.js';
import { DeviceSamplerState } from '../../src/engine/sampling/device-sampler-state.js';
import { GpuKvPool } from '../../src/engine/runners/webgpu/gpu-kv-pool.js';
import { GpuRunner } from '../../src/engine/runners/webgpu/gpu-runner.js';
import { WgslKernels } from '../../src/engine/runners/webgpu/wgsl-kernels.js';
import { BlockPool } from '../../src/engine/kv/block-pool.js';
import { KvCacheManager, type PagedSequenceKv } from '../../src/engine/kv/paged-kv.js';
import { applyKvTransfers } from '../../src/engine/kv/kv-memory.js';
import { loadModelFiles } from '../../src/engine/model/model-files.js';
import { resolveSamplingParams } from '../../src/engine/sampling/sampling-params.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { argmax, collect, loadEngine, modelDir, randomIds } from '../helpers/engines.js';
import { gpu, skipNote } from './gpu.js';

const STEPS = 20;

describe.skipIf(!gpu)(`GpuRunner: KV kept on the device${skipNote}`, () => {
  let runner: GpuRunner;
  let manager: KvCacheManager;
  let pool: BlockPool;
  let memory: GpuKvPool;
  let wasm: Engine;
  beforeAll(async () => {
    const runtime = await webGpuRuntimeForNode();
    const files = await loadModelFiles(directorySource(modelDir('tiny')), 'fp32');
    const kernels = await WgslKernels.create(runtime.gpu.device, nodeShaderSource, ['kv-gather', 'kv-scatter']);
    runner = await GpuRunner.create(runtime, files.onnx, files.config, kernels);
    pool = new BlockPool(files.config, 64, 4);
    memory = runner.createKvMemory(files.config, 64, 4, 'fp32');
    manager = new KvCacheManager(pool, 'tiny');
    wasm = await loadEngine('wasm', 'tiny');
  });
  afterAll(async () => {
    await runner?.release();
    await wasm?.runner.release();
  });

  const wasmGreedy = async (prompt: number[], n: number): Promise<number[]> =>
    (await collect(wasm, { prompt_ids: prompt, max_tokens: n, temperature: 0, ignore_eos: true })).done.tokenIds;

  /** Batched greedy decoding of `seqs` from their pending `feeds`, `steps` tokens each. */
  async function decode(seqs: PagedSequenceKv[], feeds: number[][], steps: number): Promise<number[][]> {
    const out: number[][] = seqs.map(() => []);
    for (let step = 0; step < steps; step++) {
      for (const [b, kv] of seqs.entries()) expect(manager.reserve(kv, feeds[b].length)).toBe(true);
      applyKvTransfers(memory, manager.takeTransfers()); // as the step does: copies on write, on the device
      const logits = await runner.forward(seqs.map((kv, b) => ({ kv, tokens: feeds[b] })));
      feeds = seqs.map((_, b) => [argmax(logits.last(b))]);
      for (const [b, [t]] of feeds.entries()) out[b].push(t);
    }
    return out;
  }

  it('batched greedy decoding equals wasm token for token (prompts of 5, 13 and 1 tokens; 4-token blocks)', async () => {
    const prompts = [randomIds(21, 5, 3, 512), randomIds(22, 13, 3, 512), [1]];
    const seqs = prompts.map(() => manager.create());
    const got = await decode(seqs, prompts, STEPS);
    for (let b = 0; b < prompts.length; b++) expect(got[b], `row ${b}`).toEqual(await wasmGreedy(prompts[b], STEPS));
    // The keys and values stayed on the device: the pool's memory is the runner's device buffers, and
    // reading a block back gives what the passes wrote there (a block no sequence had holds nothing).
    expect(memory).toBeInstanceOf(GpuKvPool);
    for (const [b, kv] of seqs.entries()) {
      const bytes = await memory.readBlock(kv.blocks[0]);
      expect(bytes.length).toBe(memory.blockBytes);
      expect(
        bytes.some((v) => v !== 0),
        `device pool holds row ${b}'s keys and values`,
      ).toBe(true);
    }
    const used = new Set(seqs.flatMap((kv) => kv.blocks));
    const untouched = [...Array(pool.numBlocks).keys()].find((id) => !used.has(id))!;
    expect(
      (await memory.readBlock(untouched)).every((v) => v === 0),
      `unused block ${untouched} reads back empty`,
    ).toBe(true);
    for (const kv of seqs) manager.free(kv);
    pool.checkInvariants();
  });

  it('a fork shares the prompt blocks; its first write copies the shared partial block on the device', async () => {
    const prompt = randomIds(23, 6, 3, 512); // 6 tokens: one full block and a partial one
    const parent = manager.create();
    const [first] = await decode([parent], [prompt], 1);
    const child = manager.fork(parent);
    // The child continues with another token than the parent's greedy one.
    const other = (first[0] + 1) % 512;
    const copies = manager.copyOnWrites;
    const [fromParent, fromChild] = await decode([parent, child], [[first[0]], [other]], 8);
    expect(manager.copyOnWrites, 'the child copied the shared partial block').toBeGreaterThan(copies);
    expect([first[0], ...fromParent]).toEqual(await wasmGreedy(prompt, 9));
    expect(fromChild).toEqual(await wasmGreedy([...prompt, other], 8));
    manager.free(parent);
    manager.free(child);
    pool.checkInvariants();
  });
});

describe.skipIf(!gpu)(`GpuRunner + DeviceSampler: logits sampled where they are${skipNote}`, () => {
  let runner: GpuRunner;
  let sampler: DeviceSampler;
  let manager: KvCacheManager;
  let wasm: Engine;
  beforeAll(async () => {
    const runtime = await webGpuRuntimeForNode();
    const files = await loadModelFiles(directorySource(modelDir('tiny')), 'fp32');
    const kernels = await WgslKernels.create(runtime.gpu.device, nodeShaderSource);
    runner = await GpuRunner.create(runtime, files.onnx, files.config, kernels, { logitsOnDevice: true });
    runner.createKvMemory(files.config, 64, 16, 'fp32');
    manager = new KvCacheManager(new BlockPool(files.config, 64, 16), 'tiny');
    sampler = new DeviceSampler(kernels, files.config.vocabSize);
    wasm = await loadEngine('wasm', 'tiny');
  });
  afterAll(async () => {
    await runner?.release();
    await wasm?.runner.release();
  });

  it("greedy with penalties, and seeded sampling, batched: the wasm engine's tokens", async () => {
    const prompts = [randomIds(31, 7, 3, 512), randomIds(32, 18, 3, 512), randomIds(33, 3, 3, 512)];
    const inputs = [
      { temperature: 0, repetition_penalty: 1.3, presence_penalty: 0.5 },
      { temperature: 0.9, top_p: 0.95, seed: 5 },
      { temperature: 0.7, top_k: 20, min_p: 0.01, frequency_penalty: 0.3, seed: 2 ** 40 + 9 },
    ] satisfies GenerationRequest[];
    const n = 16;
    const seqs = prompts.map(() => manager.create());
    const states = prompts.map(
      (p, b) => new DeviceSamplerState(resolveSamplingParams(inputs[b], 512), { vocabSize: 512, promptTokenIds: p }),
    );
    const got: number[][] = prompts.map(() => []);
    let feeds = prompts;
    for (let step = 0; step < n; step++) {
      for (const [b, kv] of seqs.entries()) expect(manager.reserve(kv, feeds[b].length)).toBe(true);
      const logits = await runner.forwardOnDevice(seqs.map((kv, b) => ({ kv, tokens: feeds[b] })));
      const sampled = await sampler.sample(logits.buffer, logits.lastStarts(), states);
      logits.release();
      feeds = sampled.map((t) => [t.tokenId]);
      for (const [b, t] of sampled.entries()) got[b].push(t.tokenId);
    }
    for (let b = 0; b < prompts.length; b++) {
      const { done } = await collect(wasm, { prompt_ids: prompts[b], max_tokens: n, ignore_eos: true, ...inputs[b] });
      expect(got[b], `row ${b}: ${JSON.stringify(inputs[b])}`).toEqual(done.tokenIds);
    }
    for (const kv of seqs) manager.free(kv);
  });
});

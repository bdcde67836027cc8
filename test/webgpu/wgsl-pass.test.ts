// Our own WGSL forward pass (src/engine/runners/webgpu/pass/), `--backend webgpu` on a GGUF folder, on lavapipe:
//   - llama (tiny-256) F32 and Q8_0, qwen2 / qwen3 / gemma3 F32 and Q8_0 GGUF files our writer makes (the
//     kernels' own test models, test/gguf-kernels.test.ts and test/architectures.test.ts): greedy tokens equal
//     to the float64 reference on the file's dequantised values, token for token, and its logits within 1e-5
//     relative RMS error for every format (llama also F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, the K-quants): the
//     shader dequantises each weight to the value the file stands for and multiplies float32 activations
//     (the kernels quantise activations to 8 bits instead, so their bound is 0.06).
//   - A row's logits are the same bits alone and in a batch beside other rows of other lengths.
//   - A whole step is one compute pass of a fixed number of dispatches (reported).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseImportArgs, runImportAsync } from '../../scripts/model-import.js';
import { DEFAULT_SEED } from '../../scripts/model-make.js';
import { GGUF_FILE_TYPES } from '../../scripts/model/gguf-quant-mix.js';
import { presetGgufInput, writeLlamaGguf, type GgufFileType } from '../../scripts/model/gguf-writer.js';
import { PRESETS, type PresetName } from '../../scripts/model/presets.js';
import { nodeGpuAdapter, webGpuRuntimeForNode } from '../../src/backends/ort-webgpu-node.js';
import { Engine } from '../../src/engine/engine.js';
import { readGgufHeader } from '../../src/engine/formats/gguf/gguf-header.js';
import type { WgslRunner } from '../../src/engine/runners/webgpu/pass/wgsl-runner.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { collect, lastLogits, modelDir, randomIds, relError } from '../helpers/engines.js';
import { readOnnxWeights } from '../reference/onnx-weights.js';
import { effectiveWeights } from '../../scripts/model/weight-ops.js';
import { nodeRuntime } from '../../scripts/lib/runtimes.js';
import type { Engine as EngineType } from '../../src/engine/engine.js';
import { ggufWeights } from '../helpers/gguf-weights.js';
import { LlamaReference, type LlamaConfig } from '../reference/llama-reference.js';
import { gpu, skipNote } from './gpu.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'wgsl-pass-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function imported(preset: PresetName, type: GgufFileType) {
  const file = join(dir, `${preset}-${type}.gguf`);
  writeLlamaGguf(file, presetGgufInput(preset, DEFAULT_SEED), type);
  const folder = join(dir, `${preset}-${type}`);
  await runImportAsync(parseImportArgs(['gguf', file, '--out', folder]));
  const bytes = new Uint8Array(readFileSync(file));
  const { header } = await readGgufHeader(bytes);
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as LlamaConfig;
  return { folder, config, weights: ggufWeights(bytes, header, PRESETS[preset]) };
}

/** Relative RMS logit error: every format alike, as the reference runs the file's dequantised values too. */
const BOUND = 1e-5;
const CASES: { preset: PresetName; type: GgufFileType }[] = [
  ...GGUF_FILE_TYPES.map((type) => ({ preset: 'tiny-256' as const, type })),
  { preset: 'tiny-qwen2', type: 'F32' },
  { preset: 'tiny-qwen3', type: 'F32' },
  { preset: 'tiny-gemma3', type: 'F32' },
  { preset: 'tiny-qwen2', type: 'Q8_0' },
  { preset: 'tiny-qwen3', type: 'Q8_0' },
  { preset: 'tiny-gemma3', type: 'Q8_0' },
];

describe.skipIf(!gpu)(`the WGSL pass against the float64 reference${skipNote}`, () => {
  const request = { prompt: 'Paged caches on the device', max_tokens: 16, temperature: 0, ignore_eos: true };

  for (const { preset, type } of CASES) {
    it(`${preset} ${type}: greedy tokens equal, logits within ${BOUND}, batch-invariant`, async () => {
      const { folder, config, weights } = await imported(preset, type);
      const engine = await Engine.load(await webGpuRuntimeForNode(), directorySource(folder), {
        kvCacheBytes: 2 << 20,
        blockSize: 4,
      });
      try {
        expect(engine.stats().runner).toBe('wgsl');
        const prompt = engine.tokenizer.encode(request.prompt);
        const ref = new LlamaReference(config, weights);
        const want = ref.greedy(prompt, request.max_tokens);
        expect((await collect(engine, request)).done.tokenIds).toEqual(want);
        const alone = await lastLogits(engine, prompt);
        const err = relError(alone, ref.forward(prompt, 0).at(-1)!);
        console.log(
          `${preset} ${type}: relative logit error ${err.toExponential(2)}; ${(engine.runner as WgslRunner).lastDispatches} dispatches per step`,
        );
        expect(err).toBeLessThan(BOUND);
        const others = [engine.tokenizer.encode('another row, longer than the first one'), [5]];
        expect(await lastLogits(engine, prompt, others)).toEqual(alone);
      } finally {
        await engine.runner.release();
      }
    });
  }
});

describe.skipIf(!gpu)(`the WGSL pass on a device without subgroups (the products' fallback sum)${skipNote}`, () => {
  for (const type of ['F32', 'Q4_K_M'] as const) {
    it(`tiny-256 ${type}: the reference's greedy tokens, logits within ${BOUND}, batch-invariant`, async () => {
      const { folder, config, weights } = await imported('tiny-256', type);
      const runtime = await webGpuRuntimeForNode();
      const device = await (await nodeGpuAdapter())!.requestDevice();
      expect(device.features.has('subgroups' as GPUFeatureName)).toBe(false);
      const plain = { ...runtime, gpu: { ...runtime.gpu, device } };
      const engine = await Engine.load(plain, directorySource(folder), { kvCacheBytes: 2 << 20, blockSize: 4 });
      try {
        const prompt = engine.tokenizer.encode('Sums without subgroups');
        const ref = new LlamaReference(config, weights);
        const request = { prompt_ids: prompt, max_tokens: 16, temperature: 0, ignore_eos: true };
        expect((await collect(engine, request)).done.tokenIds).toEqual(ref.greedy(prompt, 16));
        const alone = await lastLogits(engine, prompt);
        const err = relError(alone, ref.forward(prompt, 0).at(-1)!);
        console.log(`tiny-256 ${type} without subgroups: relative logit error ${err.toExponential(2)}`);
        expect(err).toBeLessThan(BOUND);
        expect(await lastLogits(engine, prompt, [[4, 5, 6, 7, 8], [9]])).toEqual(alone);
      } finally {
        await engine.runner.release();
        device.destroy();
      }
    });
  }
});

describe.skipIf(!gpu)(`the WGSL pass behind the engine's runner contract${skipNote}`, () => {
  let wgsl: EngineType;
  let kernels: EngineType;
  let ref: LlamaReference;
  beforeAll(async () => {
    const { folder, config, weights } = await imported('tiny-256', 'F32');
    wgsl = await Engine.load(await webGpuRuntimeForNode(), directorySource(folder), {
      kvCacheBytes: 4 << 20,
      blockSize: 4,
    });
    kernels = await Engine.load(await nodeRuntime('kernels'), directorySource(folder), { kvCacheBytes: 4 << 20 });
    ref = new LlamaReference(config, weights);
  });
  afterAll(async () => {
    await wgsl?.runner.release();
    await kernels?.runner.release();
  });

  it('a long prompt (past one attention chunk of 64 keys, many 4-token blocks): the reference greedy, prefilled and from the prefix cache', async () => {
    const prompt = randomIds(7, 150, 3, wgsl.samplableVocab);
    const request = { prompt_ids: prompt, max_tokens: 8, temperature: 0, ignore_eos: true };
    const want = ref.greedy(prompt, 8);
    expect((await collect(wgsl, request)).done.tokenIds).toEqual(want);
    // Again, its blocks now from the prefix cache: the same tokens.
    const hits = wgsl.stats().prefixHitTokens;
    expect((await collect(wgsl, request)).done.tokenIds).toEqual(want);
    expect(wgsl.stats().prefixHitTokens - hits).toBeGreaterThanOrEqual(144);
  });

  it("draws seeded samples on the device: the kernels' samples, batched", async () => {
    expect(wgsl.runner.deviceSampling, 'the runner draws on the device').toBeDefined();
    const request = (seed: number) => ({
      prompt: 'Once',
      max_tokens: 12,
      temperature: 0.9,
      top_p: 0.95,
      seed,
      ignore_eos: true,
    });
    const onGpu = await Promise.all([1, 2, 3].map((seed) => collect(wgsl, request(seed))));
    const onKernels = await Promise.all([1, 2, 3].map((seed) => collect(kernels, request(seed))));
    expect(onGpu.map((r) => r.done.tokenIds)).toEqual(onKernels.map((r) => r.done.tokenIds));
    expect(new Set(onGpu.map((r) => r.done.tokenIds.join())).size, 'seeds give different samples').toBe(3);
  });

  it("speculation and beam search on it give the kernels' tokens; every block comes back", async () => {
    const phrase = randomIds(5, 6, 3, wgsl.samplableVocab);
    const base = { prompt_ids: [...phrase, ...phrase, ...phrase], max_tokens: 12, temperature: 0, ignore_eos: true };
    const speculated = await collect(wgsl, { ...base, speculative: { method: 'ngram', num_tokens: 3 } });
    expect(speculated.done.tokenIds).toEqual((await collect(kernels, base)).done.tokenIds);
    const beam = { ...base, max_tokens: 5, use_beam_search: true, beam_width: 3, n: 2 };
    const beams = async (e: EngineType) => {
      const out: number[][] = [];
      for await (const event of e.generate(beam)) if (event.type === 'done') out.push(event.tokenIds);
      return out;
    };
    expect(await beams(wgsl)).toEqual(await beams(kernels));
    expect(wgsl.stats().kv.used).toBe(0);
  });
});

describe.skipIf(!gpu)(`the WGSL pass with a float16 KV pool${skipNote}`, () => {
  it("the reference's greedy tokens, logits beside the kernels' fp16 pool, batch-invariant; int8 refused by name", async () => {
    const { folder, config, weights } = await imported('tiny-256', 'F32');
    const options = { kvCacheBytes: 2 << 20, blockSize: 4, kvDtype: 'fp16' as const };
    const wgsl = await Engine.load(await webGpuRuntimeForNode(), directorySource(folder), options);
    const kernels = await Engine.load(await nodeRuntime('kernels'), directorySource(folder), options);
    try {
      const prompt = wgsl.tokenizer.encode('Half the bytes per key');
      const request = { prompt_ids: prompt, max_tokens: 16, temperature: 0, ignore_eos: true };
      const ref = new LlamaReference(config, weights);
      expect((await collect(wgsl, request)).done.tokenIds).toEqual(ref.greedy(prompt, 16));
      // A pass that reads its own prompt's keys: what it wrote as float16, it reads back as float16.
      const long = [...prompt, ...(await collect(wgsl, request)).done.tokenIds];
      const alone = await lastLogits(wgsl, long);
      const err = relError(alone, await lastLogits(kernels, long));
      console.log(`fp16 KV: relative logit error against the kernels' fp16 pool ${err.toExponential(2)}`);
      // Both round each key and value to float16 once, from float32 values that differ in their last bits
      // (other sum orders): an element within those bits of a float16 tie rounds the other way (2^-11 of it).
      expect(err).toBeLessThan(1e-4);
      expect(await lastLogits(wgsl, long, [prompt, [9, 8, 7]])).toEqual(alone);
    } finally {
      await wgsl.runner.release();
      await kernels.runner.release();
    }
    await expect(
      Engine.load(await webGpuRuntimeForNode(), directorySource(folder), { ...options, kvDtype: 'int8' }),
    ).rejects.toThrow(/int8 KV cache needs the edge kernels/);
  });
});

describe.skipIf(!gpu)(`the WGSL pass on ONNX graphs, when the kernels are asked for${skipNote}`, () => {
  // `runner: 'kernels'` on a WebGPU runtime: our own kernels there are the WGSL pass, fed by the kernels' ONNX
  // loader (MatMulNBits and 8-bit products repacked into kernels/quant.h's planes, as for the WASM kernels).
  const config = JSON.parse(readFileSync(join(modelDir('tiny'), 'config.json'), 'utf8')) as LlamaConfig;
  const fp32 = readOnnxWeights(new Uint8Array(readFileSync(join(modelDir('tiny'), 'onnx', 'model.onnx'))));
  for (const dtype of ['fp32', 'int8', 'q4'] as const) {
    it(`tiny ${dtype}: the reference's greedy tokens on the weights the file holds, logits within ${BOUND}`, async () => {
      const runtime = { ...(await webGpuRuntimeForNode()), runner: 'kernels' as const };
      const engine = await Engine.load(runtime, directorySource(modelDir('tiny')), { dtype, kvCacheBytes: 2 << 20 });
      try {
        expect(engine.stats().runner).toBe('wgsl');
        const ref = new LlamaReference(config, dtype === 'fp32' ? fp32 : effectiveWeights(PRESETS.tiny, fp32, dtype));
        const prompt = randomIds(3, 20, 3, engine.samplableVocab);
        const request = { prompt_ids: prompt, max_tokens: 16, temperature: 0, ignore_eos: true };
        expect((await collect(engine, request)).done.tokenIds).toEqual(ref.greedy(prompt, 16));
        const err = relError(await lastLogits(engine, prompt), ref.forward(prompt, 0).at(-1)!);
        console.log(`tiny ${dtype} (ONNX): relative logit error ${err.toExponential(2)}`);
        expect(err).toBeLessThan(BOUND);
      } finally {
        await engine.runner.release();
      }
    });
  }
});

describe.skipIf(!gpu)(`npm run generate --backend webgpu on a GGUF folder${skipNote}`, () => {
  it("runs it on the WGSL pass (it refused before), printing the kernels' greedy text", {
    timeout: 240_000,
  }, async () => {
    const { folder } = await imported('tiny-256', 'F32');
    const run = (backend: string) =>
      spawnSync(
        'npx',
        [
          'tsx',
          'scripts/generate.ts',
          '--model',
          folder,
          '--backend',
          backend,
          '--prompt',
          'Hi',
          '--max-tokens',
          '8',
          '--temperature',
          '0',
        ],
        { encoding: 'utf8', timeout: 180_000 },
      );
    const [gpuRun, kernelsRun] = [run('webgpu'), run('kernels')];
    expect(gpuRun.status, gpuRun.stderr).toBe(0);
    expect(gpuRun.stderr).toMatch(/tok\/s \(webgpu\)/);
    expect(kernelsRun.status, kernelsRun.stderr).toBe(0);
    expect(gpuRun.stdout).toBe(kernelsRun.stdout);
  });
});

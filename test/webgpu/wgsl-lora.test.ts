// LoRA adapters on our own WGSL forward pass (webgpu/pass/gpu-adapters.ts, wgsl-lora.ts), on lavapipe:
//   - an adapter's greedy tokens equal the float64 reference's on the merged weights W + scale·B·A, and its
//     logits are within LOGIT_BOUND of the reference's, on a llama-shaped Q8_0 GGUF (gate and up stacked in one
//     product), a llama-shaped ONNX fp32 (gate and up apart), a qwen3-shaped F32 (q/k norms) and a gemma3-shaped
//     F32 (post-norms, GeGLU) model;
//   - mixed batches: a base row's logits are the same bits alone and beside adapter rows, an adapter row's the
//     same alone and batched (several adapters and the base in one pass);
//   - a GPU host on the WGSL pass serves adapters to an engine over HTTP: the in-process pass's greedy tokens.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseImportArgs, runImportAsync } from '../../scripts/model-import.js';
import { DEFAULT_SEED } from '../../scripts/model-make.js';
import { presetGgufInput, writeLlamaGguf, type GgufFileType } from '../../scripts/model/gguf-writer.js';
import { TEST_ADAPTERS, writeTestAdapters } from '../../scripts/model/lora-adapters.js';
import { PRESETS, type PresetName } from '../../scripts/model/presets.js';
import { webGpuRuntimeForNode } from '../../src/backends/ort-webgpu-node.js';
import type { LoraAdapter } from '../../src/engine/adapters/lora-adapter.js';
import { nodeRuntime } from '../../scripts/lib/runtimes.js';
import { resolveEngineLimits } from '../../src/engine/defaults.js';
import { Engine } from '../../src/engine/engine.js';
import { httpHostLink } from '../../src/engine/runners/remote/host-link.js';
import { loadHostModel } from '../../src/gpu-host/host-model.js';
import { serveGpuHost } from '../../src/gpu-host/server.js';
import { readGgufHeader } from '../../src/engine/formats/gguf/gguf-header.js';
import { directorySource } from '../../src/sources/directory-source.js';
import type { EngineRuntime } from '../../src/engine/model/runtime.js';
import { modelDir, relError } from '../helpers/engines.js';
import { ggufWeights } from '../helpers/gguf-weights.js';
import { adapterPassLogits, expectMixedBatchExact, merged } from '../helpers/lora-merge.js';
import { LlamaReference, type LlamaConfig } from '../reference/llama-reference.js';
import { readOnnxWeights, type Tensor } from '../reference/onnx-weights.js';
import { gpu, skipNote } from './gpu.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'wgsl-lora-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Base {
  folder: string;
  config: LlamaConfig;
  weights: Map<string, Tensor>;
  runtime: EngineRuntime;
  dtype?: 'fp32';
}

async function imported(preset: PresetName, type: GgufFileType): Promise<Base> {
  const file = join(dir, `${preset}-${type}.gguf`);
  writeLlamaGguf(file, presetGgufInput(preset, DEFAULT_SEED), type);
  const folder = join(dir, `${preset}-${type}`);
  await runImportAsync(parseImportArgs(['gguf', file, '--out', folder]));
  writeTestAdapters(folder, preset);
  const bytes = new Uint8Array(readFileSync(file));
  const { header } = await readGgufHeader(bytes);
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as LlamaConfig;
  return {
    folder,
    config,
    weights: ggufWeights(bytes, header, PRESETS[preset]),
    runtime: await webGpuRuntimeForNode(),
  };
}

/** tiny-lora's ONNX fp32 graph on the WGSL pass (the kernels asked for): its gate and up stay two products. */
async function onnxFp32(): Promise<Base> {
  const folder = modelDir('tiny-lora');
  return {
    folder,
    config: JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as LlamaConfig,
    weights: readOnnxWeights(new Uint8Array(readFileSync(join(folder, 'onnx', 'model.onnx')))),
    runtime: { ...(await webGpuRuntimeForNode()), runner: 'kernels' },
    dtype: 'fp32',
  };
}

/**
 * Relative RMS logit error against the reference on the merged weights: the pass adds scale·(x Aᵀ) Bᵀ to the
 * base product in float32 where the reference multiplies the merged weights (rounded once) in float64.
 */
const LOGIT_BOUND = 1e-5;
const PROMPT = 'the adapter changes what follows';
const STEPS = 16;

async function greedy(engine: Engine, prompt: number[], adapter?: LoraAdapter): Promise<number[]> {
  const stream = engine.generate(
    { prompt_ids: prompt, max_tokens: STEPS, temperature: 0, ignore_eos: true },
    { adapter },
  );
  for await (const e of stream) if (e.type === 'done') return e.tokenIds;
  throw new Error('no done event');
}

const CASES: { name: string; base: () => Promise<Base> }[] = [
  { name: 'tiny-256 Q8_0', base: () => imported('tiny-256', 'Q8_0') },
  { name: 'tiny-lora ONNX fp32', base: onnxFp32 },
  { name: 'tiny-qwen3 F32', base: () => imported('tiny-qwen3', 'F32') },
  { name: 'tiny-gemma3 F32', base: () => imported('tiny-gemma3', 'F32') },
];

describe.skipIf(!gpu)(`LoRA adapters on the WGSL pass against the float64 reference${skipNote}`, () => {
  for (const { name, base: make } of CASES) {
    it(`${name}: greedy tokens of the merged weights, logits within ${LOGIT_BOUND}; mixed batches exact`, async () => {
      const { folder, config, weights, runtime, dtype } = await make();
      const engine = await Engine.load(runtime, directorySource(folder), {
        kvCacheBytes: 2 << 20,
        blockSize: 4,
        dtype,
      });
      try {
        expect(engine.stats().runner).toBe('wgsl');
        const prompt = engine.tokenizer.encode(PROMPT);
        const base = new LlamaReference(config, weights).greedy(prompt, STEPS);
        const loaded = await Promise.all(TEST_ADAPTERS.map((a) => engine.loadAdapter(a.name)));
        for (const [i, a] of TEST_ADAPTERS.entries()) {
          const ref = new LlamaReference(config, merged(weights, config, a));
          const want = ref.greedy(prompt, STEPS);
          expect(await greedy(engine, prompt, loaded[i]), a.name).toEqual(want);
          expect(want, `${a.name} must move the model`).not.toEqual(base);
          const [logits] = await adapterPassLogits(engine, [{ tokens: prompt, adapter: loaded[i] }]);
          const err = relError(logits, ref.forward(prompt, 0).at(-1)!);
          console.log(`${name} ${a.name}: relative logit error ${err.toExponential(2)}`);
          expect(err).toBeLessThan(LOGIT_BOUND);
        }

        await expectMixedBatchExact(engine, loaded);
      } finally {
        await engine.runner.release();
      }
    });
  }
});

describe.skipIf(!gpu)(`LoRA adapters through a GPU host on the WGSL pass${skipNote}`, () => {
  it("an engine on the host gets the in-process pass's tokens for the base and an adapter, batched", async () => {
    const { folder } = await imported('tiny-qwen3', 'F32');
    const runtime = await webGpuRuntimeForNode();
    const local = await Engine.load(runtime, directorySource(folder), { kvCacheBytes: 2 << 20 });
    const prompt = local.tokenizer.encode(PROMPT);
    const adapterName = TEST_ADAPTERS[3].name;
    const want = [await greedy(local, prompt), await greedy(local, prompt, await local.loadAdapter(adapterName))];
    await local.runner.release();
    const model = await loadHostModel(runtime, folder, { name: 'tiny-qwen3', limits: resolveEngineLimits({}) });
    const running = await serveGpuHost(model, { secret: 'wgsl-lora', port: 0 });
    try {
      const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(folder), {
        gpuHost: { link: httpHostLink(running.url, 'wgsl-lora'), model: 'tiny-qwen3', kvDtype: 'fp32' },
      });
      try {
        expect(engine.stats().host).toMatchObject({ runner: 'wgsl', backend: 'webgpu' });
        const adapter = await engine.loadAdapter(adapterName);
        expect(await Promise.all([greedy(engine, prompt), greedy(engine, prompt, adapter)])).toEqual(want);
      } finally {
        await engine.runner.release();
      }
    } finally {
      await running.close();
    }
  });
});

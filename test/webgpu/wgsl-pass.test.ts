// Our own WGSL forward pass (src/engine/runners/webgpu/pass/), `--backend webgpu` on a GGUF folder, on lavapipe:
//   - llama (tiny-256) F32 and Q8_0, qwen2 / qwen3 / gemma3 F32 and Q8_0 GGUF files our writer makes (the
//     kernels' own test models, test/gguf-kernels.test.ts and test/architectures.test.ts): greedy tokens equal
//     to the float64 reference on the file's dequantised values, token for token, and its logits within a
//     stated relative RMS error (F32 1e-5; quantised formats 1e-4: the shader dequantises the weights and
//     multiplies float32 activations, where the kernels quantise activations to 8 bits).
//   - A row's logits are the same bits alone and in a batch beside other rows of other lengths.
//   - A whole step is one compute pass of a fixed number of dispatches (reported).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseImportArgs, runImportAsync } from '../../scripts/model-import.js';
import { DEFAULT_SEED } from '../../scripts/model-make.js';
import { presetGgufInput, writeLlamaGguf, type GgufFileType } from '../../scripts/model/gguf-writer.js';
import { PRESETS, type PresetName } from '../../scripts/model/presets.js';
import { webGpuRuntimeForNode } from '../../src/backends/ort-webgpu-node.js';
import { Engine } from '../../src/engine/engine.js';
import { readGgufHeader } from '../../src/engine/formats/gguf/gguf-header.js';
import type { WgslRunner } from '../../src/engine/runners/webgpu/pass/wgsl-runner.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { collect, lastLogits, relError } from '../helpers/engines.js';
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

const BOUND = (type: GgufFileType): number => (type === 'F32' ? 1e-5 : 1e-4);
const CASES: { preset: PresetName; type: GgufFileType }[] = [
  { preset: 'tiny-256', type: 'F32' },
  { preset: 'tiny-256', type: 'Q8_0' },
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
    it(`${preset} ${type}: greedy tokens equal, logits within ${BOUND(type)}, batch-invariant`, async () => {
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
        expect(err).toBeLessThan(BOUND(type));
        const others = [engine.tokenizer.encode('another row, longer than the first one'), [5]];
        expect(await lastLogits(engine, prompt, others)).toEqual(alone);
      } finally {
        await engine.runner.release();
      }
    });
  }
});

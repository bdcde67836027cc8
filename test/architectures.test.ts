// Qwen2's, Qwen3's and Gemma 3's blocks on our kernels, from GGUF files our writer makes with each architecture's metadata
// and tensor names (scripts/model/gguf-writer.ts), imported with `model:import gguf`:
//   - F32: the float64 reference's greedy tokens, token for token, and its logits to 1e-5 (relative RMS);
//     Q8_0: within 8-bit activations' error of the reference on the file's dequantised values.
//   - What each adds counts: the reference without it (Qwen's extra tensors, Gemma's sliding windows) decodes
//     otherwise, so a pass that skipped it fails.
//   - Batch invariance: a row's logits are the same bits alone and beside another row.
//   - llama.cpp (wllama) on the same F32 file gives the same greedy tokens.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadWllama, nonUtf8TokenIds } from '../scripts/bench/wllama-node.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { parseImportArgs, runImportAsync } from '../scripts/model-import.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { presetGgufInput, writeLlamaGguf, type GgufFileType } from '../scripts/model/gguf-writer.js';
import { PRESETS, type PresetName } from '../scripts/model/presets.js';
import { Engine } from '../src/engine/engine.js';
import { readGgufHeader } from '../src/engine/formats/gguf/gguf-header.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect, lastLogits, relError, topGap } from './helpers/engines.js';
import { ggufWeights } from './helpers/gguf-weights.js';
import type { WeightMap } from '../scripts/model/weights.js';
import { argmax, LlamaReference, type LlamaConfig } from './reference/llama-reference.js';

/** The same model less what its architecture adds to a Llama block: zero biases, unit q/k norms, no windows. */
type Plain = (config: LlamaConfig, weights: WeightMap) => [LlamaConfig, WeightMap];
const without =
  (extras: RegExp, value: number): Plain =>
  (config, weights) => [
    config,
    new Map(
      [...weights].map(([name, t]) => [
        name,
        extras.test(name) ? { ...t, data: new Float32Array(t.data.length).fill(value) } : t,
      ]),
    ),
  ];
const ARCHS: { preset: PresetName; plain: Plain }[] = [
  { preset: 'tiny-qwen2', plain: without(/_proj\.bias$/, 0) },
  { preset: 'tiny-qwen3', plain: without(/_norm\.weight$/, 1) },
  {
    preset: 'tiny-gemma3',
    plain: (config, weights) => [{ ...config, layer_types: config.layer_types?.map(() => 'full_attention') }, weights],
  },
];

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'architectures-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The preset written as a GGUF of `type` and imported into a folder. */
async function imported(preset: PresetName, type: GgufFileType) {
  const file = join(dir, `${preset}-${type}.gguf`);
  writeLlamaGguf(file, presetGgufInput(preset, DEFAULT_SEED), type);
  const folder = join(dir, `${preset}-${type}`);
  await runImportAsync(parseImportArgs(['gguf', file, '--out', folder]));
  const bytes = new Uint8Array(readFileSync(file));
  const { header } = await readGgufHeader(bytes);
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as LlamaConfig;
  const weights = ggufWeights(bytes, header, PRESETS[preset]);
  return { file, folder, config, weights };
}

const loadKernels = async (folder: string) =>
  Engine.load(await nodeRuntime('kernels'), directorySource(folder), { kvCacheBytes: 2 << 20 });

describe.each(ARCHS)('$preset on the kernels', ({ preset, plain }) => {
  const request = { prompt: 'Biases and norms, per head', max_tokens: 24, temperature: 0, ignore_eos: true };

  it('F32: the float64 reference greedy token for token, and its logits', async () => {
    const { folder, config, weights } = await imported(preset, 'F32');
    expect(config.model_type).toBe(
      PRESETS[preset].architecture === 'gemma3' ? 'gemma3_text' : PRESETS[preset].architecture,
    );
    const engine = await loadKernels(folder);
    try {
      expect(engine.stats().runner).toBe('kernels');
      const prompt = engine.tokenizer.encode(request.prompt);
      const ref = new LlamaReference(config, weights);
      const want = ref.greedy(prompt, request.max_tokens);
      expect((await collect(engine, request)).done.tokenIds).toEqual(want);
      const err = relError(await lastLogits(engine, prompt), ref.forward(prompt, 0).at(-1)!);
      console.log(`${preset} F32: relative logit error ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-5);
      expect(new Set(want).size).toBeGreaterThan(8); // not one token over and over
      expect(new LlamaReference(...plain(config, weights)).greedy(prompt, request.max_tokens)).not.toEqual(want);
    } finally {
      await engine.runner.release();
    }
  });

  it('Q8_0: within 8-bit activations of the reference on the dequantised file; batch invariant', async () => {
    const { folder, config, weights } = await imported(preset, 'Q8_0');
    const engine = await loadKernels(folder);
    try {
      const prompt = engine.tokenizer.encode(request.prompt);
      const alone = await lastLogits(engine, prompt);
      const err = relError(alone, new LlamaReference(config, weights).forward(prompt, 0).at(-1)!);
      console.log(`${preset} Q8_0: relative logit error ${err.toExponential(2)} against the dequantised file`);
      expect(err).toBeLessThan(0.06);
      expect(await lastLogits(engine, prompt, [engine.tokenizer.encode('another row, longer than the first')])).toEqual(
        alone,
      );
    } finally {
      await engine.runner.release();
    }
  });

  it("F32: llama.cpp's greedy tokens (wllama)", { timeout: 180_000 }, async () => {
    const { file, folder } = await imported(preset, 'F32');
    const engine = await loadKernels(folder);
    const banned = nonUtf8TokenIds(engine.tokenizer);
    const never = new Set([...banned, ...engine.config.eosTokenIds]);
    const steps = 12;
    const ids: number[] = [];
    let firm = steps;
    const kv = engine.kv.create();
    let feed = engine.tokenizer.encode(request.prompt);
    for (let s = 0; s < steps; s++) {
      engine.kv.reserve(kv, feed.length);
      const row = Float64Array.from((await engine.runner.forward([{ kv, tokens: feed }])).last(0), (v, id) =>
        never.has(id) ? -Infinity : v,
      );
      if (firm === steps && topGap(row) < 1e-3) firm = s;
      ids.push(argmax(row));
      feed = [ids[s]];
    }
    engine.kv.free(kv);
    const w = await loadWllama(file, { cache_type_k: 'f32', cache_type_v: 'f32' });
    try {
      const got = await w.greedy(request.prompt, steps, { bannedIds: banned });
      expect(firm).toBeGreaterThan(4);
      expect(got.ids.slice(0, firm)).toEqual(ids.slice(0, firm));
    } finally {
      await w.exit();
      await engine.runner.release();
    }
  });
});

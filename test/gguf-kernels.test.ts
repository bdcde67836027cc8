// GGUF files on our kernels (src/engine/runners/wasm/weights/gguf/): files written by the GGUF writer (scripts/model/, another
// writer than the one that made the ONNX graphs), imported with `model:import gguf` (the folder serves the .gguf
// itself), read where they lie and repacked losslessly into the kernels' forms.
//   - Every type's logits against the float64 reference on the file's dequantised values (test/helpers/gguf-weights.ts).
//   - F32: the same greedy tokens as the safetensors import of the same weights, and as llama.cpp (wllama).
//   - Q8_0: the same logits, bit for bit, as our own int8 graph made from its dequantised weights (re-quantising
//     Q8_0's blocks gives the same int8 values and scales), and the same first tokens as llama.cpp.
//   - The weights file is the GGUF itself, and linear memory holds at most 1.25x its tensors.
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadWllama, nonUtf8TokenIds } from '../scripts/bench/wllama-node.js';
import { ggufFolderFiles } from '../scripts/import/gguf.js';
import { writeModelFolder } from '../scripts/import/model-folder.js';
import { weightVariants } from '../scripts/lib/model-weights.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { parseImportArgs, runImportAsync } from '../scripts/model-import.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { GGUF_FILE_TYPES } from '../scripts/model/gguf-quant-mix.js';
import { presetGgufInput, writeLlamaGguf, type GgufFileType } from '../scripts/model/gguf-writer.js';
import { generationConfigJson, llamaConfigJson, PRESETS } from '../scripts/model/presets.js';
import { readGgufHeader } from '../src/engine/formats/gguf/gguf-header.js';
import { Engine } from '../src/engine/engine.js';
import type { KernelRunner } from '../src/engine/runners/wasm/kernel-runner.js';
import { MemoryKvBlockStore } from '../src/engine/kv/memory-block-store.js';
import { directorySource } from '../src/sources/directory-source.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { collect, topGap } from './helpers/engines.js';
import { ggufWeights } from './helpers/gguf-weights.js';
import { writeHfFolder } from './helpers/hf-folder.js';
import { LlamaReference, type LlamaConfig } from './reference/llama-reference.js';

const SHAPE = PRESETS['tiny-256'];
const TYPES = GGUF_FILE_TYPES;
/** Relative RMS logit error against the dequantised file: float types compute it; the others quantise their activations to 8 bits per block of 32. */
const BOUND = (t: GgufFileType): number => (t === 'F32' || t === 'F16' || t === 'BF16' ? 1e-5 : 0.06);

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'gguf-kernels-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A GGUF of `type` for tiny-256 (weights as given, else the preset's), imported into a folder. */
async function imported(type: GgufFileType, name: string = type, weights = presetGgufInput('tiny-256', DEFAULT_SEED)) {
  const file = join(dir, `${name}.gguf`);
  writeLlamaGguf(file, weights, type);
  const folder = join(dir, name);
  await runImportAsync(parseImportArgs(['gguf', file, '--out', folder]));
  const bytes = new Uint8Array(readFileSync(file));
  const { header } = await readGgufHeader(bytes);
  return { file, folder, bytes, header };
}

const loadKernels = async (folder: string, extra: Record<string, unknown> = {}) =>
  Engine.load(await nodeRuntime('kernels'), directorySource(folder), { kvCacheBytes: 2 << 20, ...extra });

/** Teacher-forced relative RMS logit error against `ref` over a few steps of its own greedy path. */
async function relError(engine: Engine, ref: LlamaReference, prompt: number[], steps = 8): Promise<number> {
  ref.reset();
  const kv = engine.kv.create();
  let feed = prompt;
  let pos = 0;
  let err = 0;
  let norm = 0;
  for (let s = 0; s < steps; s++) {
    engine.kv.reserve(kv, feed.length);
    const logits = (await engine.runner.forward([{ kv, tokens: feed }])).last(0);
    const want = ref.forward(feed, pos).at(-1)!;
    for (let i = 0; i < want.length; i++) {
      err += (logits[i] - want[i]) ** 2;
      norm += want[i] ** 2;
    }
    pos += feed.length;
    let best = 0;
    for (let i = 1; i < want.length; i++) if (want[i] > want[best]) best = i;
    feed = [best];
  }
  engine.kv.free(kv);
  return Math.sqrt(err / norm);
}

describe('GGUF on the kernels, against the float64 reference on the file', () => {
  for (const type of TYPES) {
    it(`${type}: read where it lies, within ${BOUND(type)} of the dequantised weights`, async () => {
      const { folder, bytes, header } = await imported(type);
      expect(weightVariants(folder)).toEqual(['gguf']);
      const engine = await loadKernels(folder);
      try {
        expect(engine.stats().runner).toBe('kernels');
        const tied = !header.tensors.some((t) => t.name === 'output.weight');
        const config = { ...llamaConfigJson(SHAPE), tie_word_embeddings: tied } as unknown as LlamaConfig;
        const ref = new LlamaReference(config, ggufWeights(bytes, header, SHAPE));
        const err = await relError(engine, ref, engine.tokenizer.encode('GGUF files, read in place'));
        console.log(`${type}: relative logit error ${err.toExponential(2)} against the dequantised file`);
        expect(err).toBeLessThan(BOUND(type));
        // Memory: the repacked planes take what the file's tensors take, up to float32 scales and mins beside
        // ggml's half ones (Q4_1's blocks are 20 bytes in the file, 24 here).
        const tensors = header.tensors.reduce((n, t) => n + (t.byteSize ?? 0), 0);
        const ratio = (engine.runner as KernelRunner).weights.bytes / tensors;
        console.log(`${type}: weights in linear memory ${ratio.toFixed(3)}x the file's tensors`);
        expect(ratio).toBeLessThanOrEqual(1.25);
      } finally {
        await engine.runner.release();
      }
    });
  }
});

describe('GGUF against the other ways in', () => {
  it('F32: the same greedy tokens as the safetensors import of the same weights', async () => {
    const hf = join(dir, 'hf');
    const tokenizerFolder = (await imported('F32', 'F32-tokenizer')).folder;
    const stored = writeHfFolder(hf, SHAPE, DEFAULT_SEED, tokenizerFolder);
    const input = { ...presetGgufInput('tiny-256', DEFAULT_SEED), weights: stored };
    const { folder } = await imported('F32', 'F32-same', input);
    const fromSafetensors = join(dir, 'from-safetensors');
    await runImportAsync(parseImportArgs(['safetensors', hf, '--out', fromSafetensors]));
    const [a, b] = [await loadKernels(folder), await loadKernels(fromSafetensors)];
    const request = { prompt: 'The same weights, two files', max_tokens: 24, temperature: 0, ignore_eos: true };
    expect((await collect(a, request)).done.tokenIds).toEqual((await collect(b, request)).done.tokenIds);
    await Promise.all([a.runner.release(), b.runner.release()]);
  });

  it("Q8_0: bit for bit the kernels' int8 on its dequantised weights (re-quantising Q8_0 is lossless)", async () => {
    const { folder, bytes, header } = await imported('Q8_0', 'Q8_0-same');
    const ours = join(dir, 'int8-of-q8_0');
    const folderFiles = ggufFolderFiles(header);
    writeModelFolder(
      ours,
      {
        shape: SHAPE,
        weights: ggufWeights(bytes, header, SHAPE),
        config: llamaConfigJson(SHAPE),
        generationConfig: generationConfigJson(SHAPE),
        tokenizerJson: folderFiles.tokenizerJson,
        tokenizerConfig: folderFiles.tokenizerConfig,
      },
      ['int8'],
    );
    const [a, b] = [await loadKernels(folder), await loadKernels(ours, { dtype: 'int8' })];
    const prompt = a.tokenizer.encode('Q8_0 blocks are our int8 blocks');
    const logits = await Promise.all(
      [a, b].map(async (e) => {
        const kv = e.kv.create();
        e.kv.reserve(kv, prompt.length);
        return Array.from((await e.runner.forward([{ kv, tokens: prompt }])).last(0));
      }),
    );
    expect(logits[0]).toEqual(logits[1]);
    await Promise.all([a.runner.release(), b.runner.release()]);
  });

  for (const type of ['F32', 'Q8_0', 'Q4_K_M'] as const) {
    it(`${type}: llama.cpp's greedy tokens (wllama), ${type === 'F32' ? 'all of them' : 'up to the first near-tie'}`, {
      timeout: 180_000,
    }, async () => {
      const { file, folder, header } = await imported(type, `${type}-llama-cpp`);
      const engine = await loadKernels(folder);
      const files = ggufFolderFiles(header);
      const tok = TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig);
      const banned = nonUtf8TokenIds(tok);
      const text = 'Paged caches and quantised blocks';
      const steps = 12;
      // Ours, greedy with the same bans as llama.cpp's (never its end ids 0 and 2, never half a character).
      const never = new Set([...banned, 0, 2]);
      const ids: number[] = [];
      let firm = steps;
      const kv = engine.kv.create();
      let feed = tok.encode(text);
      for (let s = 0; s < steps; s++) {
        engine.kv.reserve(kv, feed.length);
        const row = Float64Array.from((await engine.runner.forward([{ kv, tokens: feed }])).last(0), (v, id) =>
          never.has(id) ? -Infinity : v,
        );
        let best = 0;
        for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
        // Both quantise activations, each its own way: a decision closer than this may go either way.
        if (firm === steps && topGap(row) < (type === 'F32' ? 1e-3 : 0.5)) firm = s;
        ids.push(best);
        feed = [best];
      }
      const w = await loadWllama(file, { cache_type_k: 'f32', cache_type_v: 'f32' });
      try {
        const got = await w.greedy(text, steps, { bannedIds: banned });
        const upTo = type === 'F32' ? steps : Math.max(1, firm);
        expect(got.ids.slice(0, upTo)).toEqual(ids.slice(0, upTo));
      } finally {
        await w.exit();
        await engine.runner.release();
      }
    });
  }
});

describe('the GGUF folder', () => {
  it('is the file itself: nothing written beside it is larger than the config and tokenizer', async () => {
    const { file, folder } = await imported('Q4_K_M', 'Q4_K_M-folder');
    expect(statSync(join(folder, 'model.gguf')).size).toBe(statSync(file).size);
    expect(JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')).gguf_file).toBe('model.gguf');
  });

  it('streams to its end under a KV block store, whose identity digests the weights as they arrive', async () => {
    const { folder } = await imported('Q4_K_M', 'Q4_K_M-stored');
    const kvStore = new MemoryKvBlockStore(16 << 20);
    const engine = await loadKernels(folder, { kvStore });
    const { done } = await collect(engine, { prompt: 'Hi', max_tokens: 4, temperature: 0, ignore_eos: true });
    expect(done.tokenIds).toHaveLength(4);
    await engine.runner.release();
  });
});

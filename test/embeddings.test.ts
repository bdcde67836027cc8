// Embeddings (a prefill-only mode): pooled final-normed hidden states against the float64 reference's, the same
// bits alone and in any batch (beside other embeddings and generating rows), no KV kept, and bad input refused.
import { cpSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../src/engine/engine.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { embed } from '../src/engine/embeddings/embed.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { readPooling, type PoolingMode } from '../src/engine/embeddings/pooling.js';
import { directorySource } from '../src/sources/directory-source.js';
import { loadReference } from './reference/load-reference.js';
import type { LlamaReference } from './reference/llama-reference.js';
import { collect, loadEngine, modelDir, randomIds } from './helpers/engines.js';
import { cosine } from '../scripts/bench/stats.js';

const loadFolder = async (dir: string, options: EngineOptions = {}): Promise<Engine> =>
  Engine.load(await nodeRuntime('kernels'), directorySource(dir), options);

/** Token ids of ordinary text (3..511: no BOS or EOS). */
const textIds = (seed: number, count: number): number[] => randomIds(seed, count, 3, 512);

const bits = (a: Float32Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

/** The float64 reference's vector: its final-normed hidden states pooled, L2-normalised, truncated first. */
function referenceVector(ref: LlamaReference, ids: number[], mode: PoolingMode, normalize: boolean, dims?: number) {
  ref.reset();
  ref.forward(ids, 0);
  const states = ref.hiddenStates;
  const picked = mode === 'mean' ? states : mode === 'cls' ? [states[0]] : [states[ids.length - 1]];
  const H = states[0].length;
  const v = new Float64Array(H);
  for (const s of picked) for (let i = 0; i < H; i++) v[i] += s[i] / picked.length;
  const out = v.subarray(0, dims ?? H);
  if (!normalize) return out;
  const norm = Math.sqrt(out.reduce((a, x) => a + x * x, 0));
  return out.map((x) => x / norm);
}

/** A copy of models/tiny declaring sentence-transformers pooling (`mode`), with or without a Normalize module. */
function sentenceTransformersFolder(root: string, mode: PoolingMode, normalize: boolean, name = ''): string {
  const dir = join(root, `tiny-st-${mode}-${normalize}${name}`);
  cpSync(modelDir('tiny'), dir, { recursive: true });
  const modules = [
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
    ...(normalize ? [{ idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' }] : []),
  ];
  writeFileSync(join(dir, 'modules.json'), JSON.stringify(modules));
  mkdirSync(join(dir, '1_Pooling'));
  writeFileSync(
    join(dir, '1_Pooling', 'config.json'),
    JSON.stringify({
      word_embedding_dimension: 64,
      pooling_mode_cls_token: mode === 'cls',
      pooling_mode_mean_tokens: mode === 'mean',
      pooling_mode_max_tokens: false,
      pooling_mode_lasttoken: mode === 'last',
    }),
  );
  return dir;
}

describe('embeddings', () => {
  let engine: Engine;
  let ref: LlamaReference;
  let root: string;
  beforeAll(async () => {
    // Small blocks and passes: long inputs are prefilled in chunks, across several steps.
    engine = await loadEngine('kernels', 'tiny', { blockSize: 4, maxTokensPerStep: 24 });
    ref = await loadReference(modelDir('tiny'));
    root = mkdtempSync(join(tmpdir(), 'embeddings-'));
  });
  afterAll(async () => {
    await engine.runner.release();
    rmSync(root, { recursive: true, force: true });
  });

  it('a decoder that declares nothing: last token, L2-normalised, against the float64 reference', async () => {
    expect(engine.pooling).toMatchObject({ mode: 'last', normalize: true, declaredBy: 'default' });
    for (const [i, length] of [1, 7, 40].entries()) {
      const ids = textIds(100 + i, length);
      const { embedding, promptTokens } = await embed(engine, { prompt_ids: ids }, undefined);
      expect(promptTokens).toBe(length);
      expect(embedding.length).toBe(64);
      expect(cosine(embedding, referenceVector(ref, ids, 'last', true))).toBeGreaterThanOrEqual(0.9999);
      expect(Math.abs(Math.hypot(...embedding) - 1)).toBeLessThan(1e-6);
    }
  });

  it('dimensions truncates and renormalises; out of range is refused before anything runs', async () => {
    const ids = textIds(7, 12);
    const { embedding } = await embed(engine, { prompt_ids: ids }, 16);
    expect(embedding.length).toBe(16);
    expect(cosine(embedding, referenceVector(ref, ids, 'last', true, 16))).toBeGreaterThanOrEqual(0.9999);
    for (const bad of [0, 65, 1.5, -3])
      expect(() => embed(engine, { prompt_ids: ids }, bad)).toThrow(InvalidRequestError);
    expect(() => embed(engine, { prompt_ids: [] }, undefined)).toThrow(InvalidRequestError);
    expect(() => embed(engine, { prompt_ids: [9999] }, undefined)).toThrow(InvalidRequestError);
    expect(engine.busy).toBe(false);
  });

  it('a vector is bit-identical alone and batched with other embeddings and generating rows; no KV is kept', async () => {
    const inputs = [3, 17, 50, 1, 29].map((n, i) => textIds(300 + i, n));
    const alone: string[] = [];
    for (const ids of inputs) alone.push(bits((await embed(engine, { prompt_ids: ids }, undefined)).embedding));
    const before = engine.stats();
    const generating = [
      collect(engine, { prompt_ids: textIds(1, 30), max_tokens: 12, temperature: 0 }),
      collect(engine, { prompt_ids: textIds(2, 5), max_tokens: 20, temperature: 0 }),
    ];
    const together = await Promise.all(inputs.map((ids) => embed(engine, { prompt_ids: ids }, undefined)));
    const generated = await Promise.all(generating);
    expect(together.map((e) => bits(e.embedding))).toEqual(alone);
    // The generating rows are unaffected: their greedy tokens equal their own alone.
    const soloTokens = await collect(engine, { prompt_ids: textIds(1, 30), max_tokens: 12, temperature: 0 });
    expect(generated[0].done.tokenIds).toEqual(soloTokens.done.tokenIds);
    const after = engine.stats();
    expect(after.kv.used).toBe(0);
    // Embeddings registered no block in the prefix cache (the generating rows' blocks are all that is new).
    const embeddingOnly = await loadEngine('kernels', 'tiny', { blockSize: 4 });
    for (const ids of inputs) await embed(embeddingOnly, { prompt_ids: ids }, undefined);
    expect(embeddingOnly.stats().kv).toMatchObject({ used: 0, cachedIdle: 0 });
    await embeddingOnly.runner.release();
    expect(after.kv.cachedIdle).toBeGreaterThanOrEqual(before.kv.cachedIdle);
  });

  for (const mode of ['mean', 'cls', 'last'] as const)
    it(`sentence-transformers ${mode} pooling, with and without Normalize`, async () => {
      for (const normalize of [true, false]) {
        const dir = sentenceTransformersFolder(root, mode, normalize);
        expect(await readPooling(directorySource(dir))).toEqual({ mode, normalize, declaredBy: 'modules.json' });
        const st = await loadFolder(dir, { blockSize: 4, maxTokensPerStep: 16 });
        const ids = textIds(11, 37);
        const { embedding } = await embed(st, { prompt_ids: ids }, undefined);
        const want = referenceVector(ref, ids, mode, normalize);
        expect(cosine(embedding, want)).toBeGreaterThanOrEqual(0.9999);
        if (!normalize) {
          // Unnormalised: the magnitude is the reference's too, and truncation is refused.
          expect(Math.abs(Math.hypot(...embedding) / Math.hypot(...want) - 1)).toBeLessThan(1e-4);
          expect(() => embed(st, { prompt_ids: ids }, 8)).toThrow(/not normalised/);
        }
        await st.runner.release();
      }
    });

  it('a runner without hidden states (onnxruntime) refuses embeddings before anything runs', async () => {
    const ort = await loadEngine('cpu', 'tiny');
    expect(() => embed(ort, { prompt_ids: [5, 6, 7] }, undefined)).toThrow(/onnxruntime runner/);
    expect(ort.busy).toBe(false);
    await ort.runner.release();
  });

  it('a pooling mode we do not implement is refused by name at request time; generation still serves', async () => {
    const dir = sentenceTransformersFolder(root, 'mean', true, '-max');
    writeFileSync(join(dir, '1_Pooling', 'config.json'), JSON.stringify({ pooling_mode_max_tokens: true }));
    const st = await loadFolder(dir);
    expect(() => embed(st, { prompt_ids: [1, 2, 3] }, undefined)).toThrow(/pooling_mode_max_tokens/);
    const { done } = await collect(st, { prompt_ids: [1, 2, 3], max_tokens: 2 });
    expect(done.tokenIds.length).toBe(2);
    await st.runner.release();
  });
});

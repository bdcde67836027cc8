// Hugging Face / onnx-community ONNX exports served as they are: an export-like graph (fp16 KV in and out
// and fp16 logits, as optimum writes model_fp16.onnx) gives the reference's greedy tokens; and models the
// engine cannot serve are refused with a clear error: an unsupported architecture, an operator the
// runtime lacks, a graph whose inputs do not match config.json, weights + KV past the memory budget.
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { GraphBuilder } from '../scripts/model/graph-builder.js';
import { buildLlamaModel } from '../scripts/model/llama-graph.js';
import { DataType, encodeModel, toBytes } from '../scripts/model/onnx-proto-writer.js';
import { PRESETS } from '../scripts/model/presets.js';
import { makeWeights } from '../scripts/model/weights.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { fromHalf, halfBits, halfValue, toHalf } from '../src/engine/model/half.js';
import { directorySource } from '../src/sources/directory-source.js';
import { argmax, collect, modelDir } from './helpers/engines.js';
import { loadReference } from './reference/load-reference.js';
import type { OnnxRunner } from '../src/engine/runners/ort/onnx-runner.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'onnx-export-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A copy of models/tiny's config and tokenizer files with `onnx/<file>` = the given graph bytes. */
function folder(name: string, onnxFile: string, onnx: Uint8Array, configPatch: Record<string, unknown> = {}): string {
  const out = join(dir, name);
  mkdirSync(join(out, 'onnx'), { recursive: true });
  for (const f of ['generation_config.json', 'tokenizer.json', 'tokenizer_config.json'])
    copyFileSync(join(modelDir('tiny'), f), join(out, f));
  const config = JSON.parse(readFileSync(join(modelDir('tiny'), 'config.json'), 'utf8'));
  writeFileSync(join(out, 'config.json'), JSON.stringify({ ...config, ...configPatch }));
  writeFileSync(join(out, 'onnx', onnxFile), onnx);
  return out;
}

async function refusal(load: Promise<unknown>): Promise<InvalidRequestError> {
  const err = await load.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(InvalidRequestError);
  return err as InvalidRequestError;
}

describe('half conversion (fp16 weights, KV and logits; one converter for the generator and the engine)', () => {
  it('decodes every half exactly, and encodes each one back to itself', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const decoded = fromHalf(all);
    for (let h = 0; h < 65536; h++) {
      const v = halfValue(h);
      expect(Object.is(decoded[h], v) || (Number.isNaN(v) && Number.isNaN(decoded[h]))).toBe(true);
      // NaNs come back as the canonical quiet NaN of their sign.
      if (!Number.isNaN(v)) expect(halfBits(v)).toBe(h);
    }
  });

  it('rounds to nearest even, overflows to infinity and underflows through subnormals', () => {
    expect(halfBits(1 + 2 ** -11)).toBe(0x3c00); // a tie: to the even mantissa
    expect(halfBits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(halfBits(65504)).toBe(0x7bff); // the largest half
    expect(halfBits(65520)).toBe(0x7c00); // rounds past it: infinity
    expect(halfBits(-(2 ** -24))).toBe(0x8001); // the smallest subnormal
    expect(halfBits(2 ** -26)).toBe(0); // below half of it: zero
    expect([...toHalf(Float32Array.of(0.1, -2.5))]).toEqual([0x2e66, 0xc100]);
  });
});

describe('an export-like graph: fp16 KV inputs/outputs and fp16 logits (model_fp16.onnx)', () => {
  // onnxruntime's two builds; the edge kernels read the weights alone and never see this graph's I/O.
  for (const backend of ['cpu', 'ort-wasm'] as const) {
    it(`${backend}: the engine feeds it from its float32 pool and gives the reference's greedy tokens`, async () => {
      const graph = buildLlamaModel(PRESETS.tiny, makeWeights(PRESETS.tiny, DEFAULT_SEED), 'fp32', {
        kv: 'float16',
        logits: 'float16',
      });
      const out = folder(`fp16-io-${backend}`, 'model_fp16.onnx', toBytes(encodeModel(graph)));
      const engine = await Engine.load(await nodeRuntime(backend), directorySource(out), {
        dtype: 'fp16',
        kvCacheBytes: 4 << 20,
      });
      try {
        expect((engine.runner as OnnxRunner).io).toMatchObject({
          kvType: 'float16',
          logitsType: 'float16',
          hasPositionIds: true,
        });
        const ref = await loadReference(modelDir('tiny'));
        const prompt = engine.tokenizer.encode('Hello');
        const { done } = await collect(engine, {
          prompt_ids: prompt,
          max_tokens: 24,
          temperature: 0,
          ignore_eos: true,
        });
        expect(done.tokenIds).toEqual(ref.greedy(prompt, 24));
        // Teacher-forced logits: fp16 KV and logits cost ~1e-3 relative error here, not more.
        ref.reset();
        const kv = engine.kv.create();
        let feed = prompt;
        let refLogits = ref.forward(prompt, 0).at(-1)!;
        let err = 0;
        let norm = 0;
        for (let s = 0; s < 16; s++) {
          engine.kv.reserve(kv, feed.length);
          const logits = (await engine.runner.forward([{ kv, tokens: feed }])).last(0);
          for (let i = 0; i < logits.length; i++) {
            err += (logits[i] - refLogits[i]) ** 2;
            norm += refLogits[i] ** 2;
          }
          feed = [argmax(refLogits)];
          refLogits = ref.forward(feed, prompt.length + s)[0];
        }
        engine.kv.free(kv);
        expect(Math.sqrt(err / norm)).toBeLessThan(5e-3);
      } finally {
        await engine.runner.release();
      }
    });
  }
});

describe('an export that takes no position_ids (positions counted from attention_mask in the graph)', () => {
  it('is fed without them; batched rows with different pasts still give the reference tokens', async () => {
    const graph = buildLlamaModel(PRESETS.tiny, makeWeights(PRESETS.tiny, DEFAULT_SEED), 'fp32', {
      positionIds: false,
    });
    const out = folder('no-position-ids', 'model.onnx', toBytes(encodeModel(graph)));
    const engine = await Engine.load(await nodeRuntime('cpu'), directorySource(out), { kvCacheBytes: 4 << 20 });
    try {
      expect((engine.runner as OnnxRunner).io.hasPositionIds).toBe(false);
      const ref = await loadReference(modelDir('tiny'));
      const prompts = [
        engine.tokenizer.encode('Hello'),
        engine.tokenizer.encode('A longer prompt, so the rows are padded differently'),
      ];
      const results = await Promise.all(
        prompts.map((p) => collect(engine, { prompt_ids: p, max_tokens: 16, temperature: 0, ignore_eos: true })),
      );
      for (const [i, { done }] of results.entries()) expect(done.tokenIds).toEqual(ref.greedy(prompts[i], 16));
    } finally {
      await engine.runner.release();
    }
  });
});

describe('refusals', () => {
  const tinyFp32 = () => new Uint8Array(readFileSync(join(modelDir('tiny'), 'onnx/model.onnx')));

  it('an architecture the engine does not serve', async () => {
    const out = folder('mamba', 'model.onnx', tinyFp32(), { model_type: 'mamba' });
    const err = await refusal(Engine.load(await nodeRuntime('cpu'), directorySource(out)));
    expect(err.code).toBe('unsupported_model');
    expect(err.message).toMatch(/model_type "mamba" is not supported; the engine serves llama, mistral, qwen2/);
    const sliding = folder('sliding', 'model.onnx', tinyFp32(), { model_type: 'mistral', sliding_window: 512 });
    expect((await refusal(Engine.load(await nodeRuntime('cpu'), directorySource(sliding)))).message).toMatch(
      /sliding_window 512 is shorter than the context/,
    );
  });

  it('an operator the runtime lacks (named in the error), on both backends', async () => {
    const g = new GraphBuilder();
    const ids = g.input({ name: 'input_ids', elemType: DataType.INT64, shape: ['batch_size', 'sequence_length'] });
    g.output({ name: 'logits', elemType: DataType.FLOAT, shape: ['batch_size', 'sequence_length', 512] });
    g.op('FancyAttention', [ids], { name: 'fancy', domain: 'com.example', out: 'logits' });
    const model = {
      irVersion: 8,
      opsets: [
        { domain: '', version: 17 },
        { domain: 'com.example', version: 1 },
      ],
      producerName: 'test',
      producerVersion: '1',
      graph: g.graph('fancy'),
    };
    const out = folder('fancy-op', 'model.onnx', toBytes(encodeModel(model)));
    for (const backend of ['cpu', 'wasm'] as const) {
      const err = await refusal(Engine.load(await nodeRuntime(backend), directorySource(out)));
      expect(err.code).toBe('unsupported_model');
      expect(err.message).toMatch(
        new RegExp(`^the ${backend} backend cannot run the model's ONNX graph: .*FancyAttention`, 's'),
      );
    }
  });

  it('a graph whose inputs do not match config.json (num_hidden_layers 3 for a 2-layer graph)', async () => {
    const out = folder('layers', 'model.onnx', tinyFp32(), { num_hidden_layers: 3 });
    const err = await refusal(Engine.load(await nodeRuntime('cpu'), directorySource(out)));
    expect(err.message).toMatch(/has no past_key_values\.2\.key input \(num_hidden_layers is 3/);
  });

  it('weights + KV cache past the memory budget, saying what would fit', async () => {
    const source = directorySource(modelDir('tiny'));
    const weights = readFileSync(join(modelDir('tiny'), 'onnx/model.onnx')).byteLength;
    const budget = weights + (1 << 20);
    const err = await refusal(
      Engine.load(await nodeRuntime('cpu'), source, { kvCacheBytes: 2 << 20, memoryBudgetBytes: budget }),
    );
    expect(err.code).toBe('model_too_large');
    expect(err.message).toMatch(
      /weights 0\.\d MiB \+ KV cache 2\.0 MiB = .* > budget .*; a KV cache of at most 1\.0 MiB \(2048 tokens at 512 B\/token\) would fit/,
    );
    const tooSmall = await refusal(
      Engine.load(await nodeRuntime('cpu'), source, { kvCacheBytes: 1 << 20, memoryBudgetBytes: weights >> 1 }),
    );
    expect(tooSmall.message).toMatch(/these parts already take .* before any KV cache: only less of them fits/);
    // Exactly at the budget it loads.
    const engine = await Engine.load(await nodeRuntime('cpu'), source, {
      kvCacheBytes: 1 << 20,
      memoryBudgetBytes: budget,
    });
    await engine.runner.release();
  });
});

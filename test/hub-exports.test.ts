// The generator's hub-shaped exports (model:make --export-style hub; docs/models.md, "The hub's ONNX
// exports"): the same random weights written as optimum's torch export and transformers.js' quantisers
// write a Llama, in every dtype the hub's onnx/ folders hold and the quantiser settings they use.
//   - Each one runs on onnxruntime-node and -web inside the engine: its logits are checked, teacher-forced,
//     against the float64 reference run on the weights the graph stores (dequantised), within a bound per
//     flavour, and against the fp32 weights it was made from; greedy tokens equal the reference's wherever
//     the graph computes in float (all but quantize_dynamic's, which quantises activations per tensor).
//   - Each one's weights are found by walking its nodes as the docs describe (test/helpers/hub-graph-walk.ts),
//     never by names, and every weight found is the one the reference uses for that role.
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SEED, makeModel, parseMakeArgs } from '../scripts/model-make.js';
import { HUB_ONNX_FILE, hubFlavour, type HubDtype, type HubFlavour } from '../scripts/model/export/hub-flavour.js';
import { buildHubLlamaModel } from '../scripts/model/export/hub-llama-graph.js';
import { dequantizeLinear8, dequantizeNBits } from '../scripts/model/export/ort-quantize.js';
import { DataType, encodeModel, toBytes, type ModelDef, type TensorData } from '../scripts/model/onnx-proto-writer.js';
import { llamaConfigJson, PRESETS, type PresetName } from '../scripts/model/presets.js';
import { makeWeights, type WeightMap } from '../scripts/model/weights.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { cosine } from '../scripts/bench/stats.js';
import { embed } from '../src/engine/embeddings/embed.js';
import { Engine } from '../src/engine/engine.js';
import { fromHalf } from '../src/engine/model/half.js';
import type { OnnxRunner } from '../src/engine/runners/ort/onnx-runner.js';
import { directorySource } from '../src/sources/directory-source.js';
import { argmax, collect, modelDir } from './helpers/engines.js';
import { walkHubGraph, type LinearUnit } from './helpers/hub-graph-walk.js';
import { LlamaReference, type LlamaConfig } from './reference/llama-reference.js';
import { loadReference } from './reference/load-reference.js';

interface Case {
  name: string;
  dtype: HubDtype;
  flavour?: Partial<Omit<HubFlavour, 'dtype'>>;
  preset?: PresetName;
  /** bound on the relative RMS error of the logits against the reference on the stored weights */
  stored: number;
  /** bound on it against the reference on the fp32 weights the export was made from */
  fp32: number;
  /** greedy tokens equal the stored-weight reference's */
  greedy: boolean;
}

// Bounds: against the stored weights ~3× the worst relative RMS error measured on either backend (what the
// graph gets wrong); against the fp32 weights ~1.3× it (the quantiser's own error, so a change to the
// quantiser shows). docs/models.md lists the measured figures.
const CASES: Case[] = [
  { name: 'fp32 (model.onnx)', dtype: 'fp32', stored: 1e-5, fp32: 1e-5, greedy: true },
  {
    name: 'fp32, untied lm_head, RoPE frequencies computed in-graph from theta',
    dtype: 'fp32',
    preset: 'tiny-untied',
    flavour: { rope: 'computed' },
    stored: 1e-5,
    fp32: 1e-5,
    greedy: true,
  },
  {
    name: 'fp16 (optimum: half weights, activations, KV, logits)',
    dtype: 'fp16',
    stored: 4e-3,
    fp32: 6e-3,
    greedy: true,
  },
  {
    name: 'fp16 with float32 I/O (keep_io_types), Reciprocal, norms as onnx::Mul_N, RoPE as a Constant',
    dtype: 'fp16',
    flavour: { halfIo: false, rsqrt: 'reciprocal', normNames: 'folded', rope: 'constant' },
    stored: 4e-3,
    fp32: 6e-3,
    greedy: true,
  },
  { name: 'q4 (symmetric, block 32; fp32 embedding)', dtype: 'q4', stored: 1e-5, fp32: 0.6, greedy: true },
  {
    name: 'q4 untied (symmetric, block 32)',
    dtype: 'q4',
    preset: 'tiny-untied',
    stored: 1e-5,
    fp32: 0.6,
    greedy: true,
  },
  {
    name: 'q4 with zero points, block 16',
    dtype: 'q4',
    flavour: { symmetric: false, blockSize: 16 },
    stored: 1e-5,
    fp32: 0.45,
    greedy: true,
  },
  {
    name: 'q4, block 128 (K = 64 and 176 padded), untied',
    dtype: 'q4',
    preset: 'tiny-untied',
    flavour: { blockSize: 128 },
    stored: 1e-5,
    fp32: 0.55,
    greedy: true,
  },
  {
    name: 'q4 with zero points, block 64, accuracy_level 4 (int8 activations on the native CPU backend)',
    dtype: 'q4',
    flavour: { symmetric: false, blockSize: 64, accuracyLevel: 4 },
    stored: 0.1,
    fp32: 0.6,
    greedy: false,
  },
  { name: 'MatMulNBits 8-bit, symmetric', dtype: 'q4', flavour: { bits: 8 }, stored: 1e-5, fp32: 0.04, greedy: true },
  {
    name: 'MatMulNBits 8-bit with zero points, block 64',
    dtype: 'q4',
    flavour: { bits: 8, symmetric: false, blockSize: 64 },
    stored: 1e-5,
    fp32: 0.04,
    greedy: true,
  },
  { name: 'q4f16 (half scales, activations, KV, logits)', dtype: 'q4f16', stored: 5e-3, fp32: 0.6, greedy: true },
  {
    name: 'q4f16 with zero points, block 16, RoPE as a Constant',
    dtype: 'q4f16',
    flavour: { symmetric: false, blockSize: 16, rope: 'constant' },
    stored: 5e-3,
    fp32: 0.45,
    greedy: true,
  },
  { name: 'int8 (quantize_dynamic QInt8, per tensor)', dtype: 'int8', stored: 0.1, fp32: 0.08, greedy: false },
  { name: 'int8 per channel', dtype: 'int8', flavour: { perChannel: true }, stored: 0.1, fp32: 0.08, greedy: false },
  { name: 'uint8 (QUInt8, per tensor)', dtype: 'uint8', stored: 0.1, fp32: 0.08, greedy: false },
  {
    name: 'uint8 per channel, untied',
    dtype: 'uint8',
    preset: 'tiny-untied',
    flavour: { perChannel: true },
    stored: 0.12,
    fp32: 0.08,
    greedy: false,
  },
  { name: 'quantized (QInt8 for a model without Conv)', dtype: 'quantized', stored: 0.1, fp32: 0.08, greedy: false },
];

const STEPS = 16;
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hub-exports-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Built {
  model: ModelDef;
  /** every weight as the graph stores it, dequantised, under reference names */
  stored: WeightMap;
  preset: PresetName;
}

const built = new Map<string, Built>();
function build(c: Case): Built {
  let b = built.get(c.name);
  if (!b) {
    const preset = c.preset ?? 'tiny';
    const stored: WeightMap = new Map();
    const model = buildHubLlamaModel(
      PRESETS[preset],
      makeWeights(PRESETS[preset], DEFAULT_SEED),
      hubFlavour(c.dtype, c.flavour),
      stored,
    );
    b = { model, stored, preset };
    built.set(c.name, b);
  }
  return b;
}

/** A model folder: the preset's config and tokenizer, and the export under its hub file name. */
function folder(c: Case, b: Built, tag: string): string {
  const out = join(dir, `${c.name.replace(/[^a-z0-9]+/gi, '-')}-${tag}`);
  mkdirSync(join(out, 'onnx'), { recursive: true });
  for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'])
    copyFileSync(join(modelDir(b.preset), f), join(out, f));
  writeFileSync(join(out, 'onnx', HUB_ONNX_FILE[c.dtype]), toBytes(encodeModel(b.model)));
  return out;
}

/** The reference on the stored weights: always untied, since the export keeps its own lm_head copy. */
function storedReference(b: Built): LlamaReference {
  const config = { ...llamaConfigJson(PRESETS[b.preset]), tie_word_embeddings: false } as LlamaConfig;
  return new LlamaReference(config, b.stored);
}

/** Teacher-forced on the `stored` reference's own greedy path: relative RMS error against both references. */
async function relativeErrors(engine: Engine, refs: LlamaReference[], prompt: number[]): Promise<number[]> {
  for (const r of refs) r.reset();
  const kv = engine.kv.create();
  let feed = prompt;
  let pos = 0;
  const err = refs.map(() => 0);
  const norm = refs.map(() => 0);
  try {
    for (let s = 0; s < STEPS; s++) {
      engine.kv.reserve(kv, feed.length);
      const logits = (await engine.runner.forward([{ kv, tokens: feed }])).last(0);
      const expected = refs.map((r) => r.forward(feed, pos).at(-1)!);
      for (const [r, e] of expected.entries())
        for (let i = 0; i < e.length; i++) {
          err[r] += (logits[i] - e[i]) ** 2;
          norm[r] += e[i] ** 2;
        }
      pos += feed.length;
      feed = [argmax(expected[0])];
    }
  } finally {
    engine.kv.free(kv);
  }
  return err.map((e, r) => Math.sqrt(e / norm[r]));
}

describe('hub-shaped exports on onnxruntime, against the float64 reference', () => {
  for (const c of CASES) {
    for (const backend of ['cpu', 'ort-wasm'] as const) {
      it(`${c.name}: ${backend}`, async () => {
        const b = build(c);
        const engine = await Engine.load(await nodeRuntime(backend), directorySource(folder(c, b, backend)), {
          dtype: c.dtype,
          kvCacheBytes: 4 << 20,
        });
        try {
          const half = (c.dtype === 'fp16' || c.dtype === 'q4f16') && c.flavour?.halfIo !== false;
          expect((engine.runner as OnnxRunner).io).toMatchObject({
            kvType: half ? 'float16' : 'float32',
            logitsType: half ? 'float16' : 'float32',
            hasPositionIds: true,
          });
          const stored = storedReference(b);
          const fp32 = await loadReference(modelDir(b.preset));
          const prompt = engine.tokenizer.encode('The hub exports, shaped as the exporter writes them');
          const [vsStored, vsFp32] = await relativeErrors(engine, [stored, fp32], prompt);
          console.log(
            `${c.name} [${backend}]: relative logit error ${vsStored.toExponential(2)} (stored weights), ` +
              `${vsFp32.toExponential(2)} (fp32 weights)`,
          );
          expect(vsStored).toBeLessThan(c.stored);
          expect(vsFp32).toBeLessThan(c.fp32);
          if (c.greedy) {
            const { done } = await collect(engine, {
              prompt_ids: prompt,
              max_tokens: 24,
              temperature: 0,
              ignore_eos: true,
            });
            expect(done.tokenIds).toEqual(stored.greedy(prompt, 24));
          }
        } finally {
          await engine.runner.release();
        }
      });
    }
  }
});

/**
 * The same files on our kernels, which find each weight by walking the graph (src/engine/runners/wasm/weights/onnx/) and
 * read it in the format the file stores: float32, float16, MatMulNBits of any block size that is a multiple
 * of 32 (16 is refused: two scales in one of our blocks), quantize_dynamic's int8 and uint8. Activations are
 * quantised per block of 32 of their row before an integer product, so a quantised graph's logits are within
 * what 8-bit activations allow of the stored weights (where onnxruntime dequantises the weights instead), and
 * model_q4's float32 embedding is read as 8-bit blocks (a reported, bounded error).
 */
describe('hub-shaped exports on the edge kernels, against the float64 reference', () => {
  const kernelBound = (c: Case): number =>
    c.dtype === 'fp32' ? 1e-4 : c.dtype === 'fp16' ? 4e-3 : c.dtype === 'q4f16' ? 6e-2 : 6e-2;
  for (const c of CASES) {
    const blockSize = c.flavour?.blockSize ?? 32;
    if (blockSize === 16) {
      it(`${c.name}: refused by the kernels, naming the block size; wasm falls back to onnxruntime`, async () => {
        const b = build(c);
        await expect(
          Engine.load(await nodeRuntime('kernels'), directorySource(folder(c, b, 'kernels')), { dtype: c.dtype }),
        ).rejects.toThrow(/edge kernels cannot run this model: .*block size 16/);
        const engine = await Engine.load(await nodeRuntime('wasm'), directorySource(folder(c, b, 'wasm')), {
          dtype: c.dtype,
          kvCacheBytes: 4 << 20,
        });
        expect(engine.stats().runner).toBe('onnxruntime');
        await engine.runner.release();
      });
      continue;
    }
    it(`${c.name}: kernels`, async () => {
      const b = build(c);
      const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(folder(c, b, 'kernels')), {
        dtype: c.dtype,
        kvCacheBytes: 4 << 20,
      });
      try {
        expect(engine.stats().runner).toBe('kernels');
        const stored = storedReference(b);
        const prompt = engine.tokenizer.encode('The hub exports, shaped as the exporter writes them');
        const [vsStored] = await relativeErrors(engine, [stored], prompt);
        console.log(`${c.name} [kernels]: relative logit error ${vsStored.toExponential(2)} (stored weights)`);
        expect(vsStored).toBeLessThan(kernelBound(c));
        if (c.dtype === 'fp32' || c.dtype === 'fp16') {
          const { done } = await collect(engine, {
            prompt_ids: prompt,
            max_tokens: 24,
            temperature: 0,
            ignore_eos: true,
          });
          expect(done.tokenIds).toEqual(stored.greedy(prompt, 24));
        }
      } finally {
        await engine.runner.release();
      }
    });
  }
});

/** A weight read back from its initializers, as the reference's (K, N) float matrix. */
function decode(unit: LinearUnit): Float32Array {
  const [w] = unit.weights;
  if (unit.kind === 'MatMul') return floats(w);
  if (unit.kind === 'MatMulNBits') {
    const attr = (k: string) => {
      const a = unit.node.attrs?.[k];
      if (a?.kind !== 'int') throw new Error(`MatMulNBits has no ${k}`);
      return a.v;
    };
    const [k, n, bits, blockSize] = ['K', 'N', 'bits', 'block_size'].map(attr);
    const [, scales, zeroPoints] = unit.weights;
    const m = { k, n, kBlocks: Math.ceil(k / blockSize), packed: w.data as Uint8Array, scales: floats(scales) };
    return dequantizeNBits({ ...m, zeroPoints: zeroPoints?.data as Uint8Array | undefined }, bits as 4 | 8, blockSize);
  }
  const [, zeroPoint, scale] = unit.weights;
  const type = w.dataType === DataType.INT8 ? 'int8' : 'uint8';
  const q = { type, data: w.data, scale: floats(scale), zeroPoint: zeroPoint.data } as const;
  return dequantizeLinear8(q as Parameters<typeof dequantizeLinear8>[0], w.dims[0], w.dims[1]);
}

function floats(t: TensorData): Float32Array {
  if (t.dataType === DataType.FLOAT) return t.data as Float32Array;
  if (t.dataType === DataType.FLOAT16) return fromHalf(t.data as Uint16Array);
  throw new Error(`${t.name} is not float`);
}

const FOLDED = /^onnx::(MatMul|Mul|Expand)_\d+(_Q4|_Q8|_scales|_zero_points|_quantized|_scale|_zero_point)?$/;
const PARAM =
  /^model\.(embed_tokens|norm|layers\.\d+\.(input|post_attention)_layernorm)\.weight(_quantized|_scale|_zero_point)?$/;
const hubName = (name: string) => FOLDED.test(name) || PARAM.test(name);

describe('hub-shaped exports: every weight found by walking the graph, as docs/models.md describes', () => {
  for (const c of CASES) {
    it(c.name, () => {
      const { model, stored, preset } = build(c);
      const p = PRESETS[preset];
      const f = hubFlavour(c.dtype, c.flavour);
      const names = model.graph.initializers.map((t) => t.name);
      expect(names).not.toContain('rope.inv_freq');
      expect(names.filter((n) => !hubName(n))).toEqual([]);
      expect(names.filter((n) => n.startsWith('onnx::Expand_')).length).toBe(f.rope === 'folded' ? 1 : 0);

      const roles = walkHubGraph(model.graph, p.numLayers);
      const get = (name: string) => stored.get(name)!.data;
      const kind =
        c.dtype === 'q4' || c.dtype === 'q4f16'
          ? 'MatMulNBits'
          : c.dtype === 'fp32' || c.dtype === 'fp16'
            ? 'MatMul'
            : 'MatMulInteger';
      const check = (unit: LinearUnit, name: string) => {
        expect(unit.kind, name).toBe(kind);
        expect(decode(unit), name).toEqual(get(name));
        if (unit.kind === 'MatMulNBits') {
          expect(unit.node.attrs).toMatchObject({ bits: { v: f.bits }, block_size: { v: f.blockSize } });
          expect(unit.node.attrs?.accuracy_level?.v).toBe(f.accuracyLevel);
          expect(unit.weights.length, `${name}: zero_points input`).toBe(f.symmetric ? 2 : 3);
          expect(unit.weights[1].dataType).toBe(c.dtype === 'q4f16' ? DataType.FLOAT16 : DataType.FLOAT);
        }
        if (unit.kind === 'MatMulInteger')
          expect(unit.weights[2].dims).toEqual(f.perChannel ? [unit.weights[0].dims[1]] : []);
      };
      roles.layers.forEach((l, i) => {
        const w = `model.layers.${i}`;
        expect(floats(l.attnNorm)).toEqual(get(`${w}.input_layernorm.weight`));
        expect(floats(l.mlpNorm)).toEqual(get(`${w}.post_attention_layernorm.weight`));
        for (const proj of ['q', 'k', 'v', 'o'] as const) check(l[proj], `${w}.self_attn.${proj}_proj.weight`);
        for (const proj of ['gate', 'up', 'down'] as const) check(l[proj], `${w}.mlp.${proj}_proj.weight`);
      });
      expect(floats(roles.norm)).toEqual(get('model.norm.weight'));
      check(roles.lmHead, 'lm_head.weight');
      const [table, scale, zeroPoint] = roles.embedding;
      const embedding =
        table.dataType === DataType.UINT8
          ? dequantizeLinear8(
              {
                type: 'uint8',
                data: table.data as Uint8Array,
                scale: floats(scale),
                zeroPoint: zeroPoint.data as Uint8Array,
              },
              p.vocabSize,
              p.hiddenSize,
            )
          : floats(table);
      expect(embedding).toEqual(get('model.embed_tokens.weight'));
      // q4 keeps the embedding in float (fp32, or half in q4f16) beside a quantised output projection.
      if (kind === 'MatMulNBits') expect(table.dataType).toBe(c.dtype === 'q4f16' ? DataType.FLOAT16 : DataType.FLOAT);
    });
  }
});

describe('model:make --export-style hub', () => {
  it('writes every hub dtype under its hub file name, byte-identical run to run', () => {
    const a = join(dir, 'make-a');
    const b = join(dir, 'make-b');
    const opts = parseMakeArgs([
      '--preset',
      'tiny',
      '--out',
      a,
      '--export-style',
      'hub',
      '--dtype',
      'all',
      '--zero-points',
      '--block-size',
      '16',
    ]);
    expect(opts.hub).toMatchObject({
      flavour: { symmetric: false, blockSize: 16, bits: 4, halfIo: true, rope: 'folded' },
    });
    makeModel(opts);
    makeModel({ ...opts, outDir: b });
    const files = readdirSync(join(a, 'onnx')).sort();
    expect(files).toEqual(Object.values(HUB_ONNX_FILE).sort());
    for (const file of files)
      expect(readFileSync(join(a, 'onnx', file)).equals(readFileSync(join(b, 'onnx', file))), file).toBe(true);
    // model_quantized is model_int8 for a Llama (QInt8 unless the graph has Conv or attention ops).
    expect(
      readFileSync(join(a, 'onnx/model_quantized.onnx')).equals(readFileSync(join(a, 'onnx/model_int8.onnx'))),
    ).toBe(true);
  });

  it("task feature-extraction: last_hidden_state and no LM head, whose last position is our engine's embedding", async () => {
    const ours = join(dir, 'features-ours');
    const hub = join(dir, 'features-hub');
    makeModel({ preset: 'tiny', outDir: ours });
    makeModel({ preset: 'tiny', outDir: hub, hub: { dtypes: [], flavour: { task: 'feature-extraction' } } });
    const ort = await import('onnxruntime-node');
    const session = await ort.InferenceSession.create(join(hub, 'onnx/model.onnx'));
    expect(session.outputNames.filter((n) => !n.startsWith('present.'))).toEqual(['last_hidden_state']);
    const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(ours), { dtype: 'fp32' });
    try {
      const ids = engine.tokenizer.encode('the vectors of one model, two ways');
      const { numKvHeads, headDim, numLayers, hiddenSize: H } = engine.config;
      const feeds: Record<string, InstanceType<typeof ort.Tensor>> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]),
        position_ids: new ort.Tensor(
          'int64',
          BigInt64Array.from(ids, (_id, i) => BigInt(i)),
          [1, ids.length],
        ),
      };
      for (let l = 0; l < numLayers; l++)
        for (const kind of ['key', 'value'])
          feeds[`past_key_values.${l}.${kind}`] = new ort.Tensor('float32', new Float32Array(0), [
            1,
            numKvHeads,
            0,
            headDim,
          ]);
      const states = (await session.run(feeds)).last_hidden_state.data as Float32Array;
      const last = states.slice((ids.length - 1) * H, ids.length * H);
      const mine = (await embed(engine, { prompt_ids: ids }, undefined)).embedding;
      // onnxruntime's float32 sums in its own order: a cosine, not bits.
      expect(cosine(mine, last)).toBeGreaterThan(0.99999);
    } finally {
      await engine.runner.release();
    }
  });

  it('refuses hub options without --export-style hub, and bad settings, saying why', () => {
    expect(() => parseMakeArgs(['--preset', 'tiny', '--out', 'x', '--zero-points'])).toThrow(
      /--zero-points \(it belongs to --export-style hub\)/,
    );
    expect(() =>
      parseMakeArgs(['--preset', 'tiny', '--out', 'x', '--export-style', 'hub', '--block-size', '48']),
    ).toThrow(/block size must be 16, 32, 64 or 128, got 48/);
    expect(() => parseMakeArgs(['--preset', 'tiny', '--out', 'x', '--export-style', 'hub', '--bits', '3'])).toThrow(
      /bits must be 4 or 8/,
    );
    expect(() => parseMakeArgs(['--preset', 'tiny', '--out', 'x', '--export-style', 'hub', '--dtype', 'bnb4'])).toThrow(
      /^Usage: /,
    );
    expect(() => parseMakeArgs(['--preset', 'tiny', '--out', 'x', '--export-style', 'onnx'])).toThrow(
      /--export-style is ours or hub/,
    );
    expect(parseMakeArgs(['--preset', 'tiny', '--out', 'x', '--dtype', 'q4'])).toEqual({
      preset: 'tiny',
      outDir: 'x',
      seed: DEFAULT_SEED,
      dtypes: ['q4'],
    });
  });
});

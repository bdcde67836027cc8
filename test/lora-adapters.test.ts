// LoRA adapters on the kernels (src/engine/adapters/, runners/wasm/lora-deltas.ts):
//   - an adapter's greedy tokens equal the float64 reference's on the merged weights W + scale·B·A, on a
//     llama-shaped (tiny, ONNX) and a qwen3-shaped (tiny-qwen3, GGUF F32) model, and differ from the base's;
//   - mixed batches: a base row's logits are the same bits alone and beside adapter rows, an adapter row's the
//     same alone and batched, on fp32, int8 and q4 bases;
//   - the prefix cache keys blocks by adapter; the LRU evicts within its bytes and an evicted adapter reloads;
//   - every bad adapter is refused at load, naming the file and the reason, and the engine serves on.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { parseImportArgs, runImportAsync } from '../scripts/model-import.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { presetGgufInput, writeLlamaGguf } from '../scripts/model/gguf-writer.js';
import { adapterConfig, adapterTensors, TEST_ADAPTERS, writeTestAdapters } from '../scripts/model/lora-adapters.js';
import { PRESETS } from '../scripts/model/presets.js';
import { writeSafetensors } from '../src/engine/adapters/safetensors.js';
import type { LoraAdapter } from '../src/engine/adapters/lora-adapter.js';
import { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { readGgufHeader } from '../src/engine/formats/gguf/gguf-header.js';
import { directorySource } from '../src/sources/directory-source.js';
import { modelDir } from './helpers/engines.js';
import { ggufWeights } from './helpers/gguf-weights.js';
import { LlamaReference, type LlamaConfig } from './reference/llama-reference.js';
import { readOnnxWeights } from './reference/onnx-weights.js';
import { expectMixedBatchExact, merged } from './helpers/lora-merge.js';

const kernels = async (folder: string, options = {}) =>
  Engine.load(await nodeRuntime('kernels'), directorySource(folder), { kvCacheBytes: 2 << 20, ...options });

async function greedy(engine: Engine, prompt: string, steps: number, adapter?: LoraAdapter): Promise<number[]> {
  const stream = engine.generate({ prompt, max_tokens: steps, temperature: 0, ignore_eos: true }, { adapter });
  for await (const e of stream) if (e.type === 'done') return e.tokenIds;
  throw new Error('no done event');
}

const PROMPT = 'the adapter changes what follows';
const STEPS = 20;

describe('an adapter against the float64 reference of its merged weights', () => {
  it('llama-shaped (tiny, ONNX fp32): every test adapter, greedy token for token, and not the base', async () => {
    const folder = modelDir('tiny-lora');
    const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as LlamaConfig;
    const weights = readOnnxWeights(new Uint8Array(readFileSync(join(folder, 'onnx', 'model.onnx'))));
    const engine = await kernels(folder, { dtype: 'fp32' });
    try {
      const prompt = engine.tokenizer.encode(PROMPT);
      const base = new LlamaReference(config, weights).greedy(prompt, STEPS);
      expect(await greedy(engine, PROMPT, STEPS)).toEqual(base);
      for (const a of TEST_ADAPTERS) {
        const want = new LlamaReference(config, merged(weights, config, a)).greedy(prompt, STEPS);
        const adapter = await engine.loadAdapter(a.name);
        expect(adapter.scale).toBe(a.rslora ? a.alpha / Math.sqrt(a.rank) : a.alpha / a.rank);
        expect(await greedy(engine, PROMPT, STEPS, adapter), a.name).toEqual(want);
        expect(want, `${a.name} must move the model`).not.toEqual(base);
      }
    } finally {
      await engine.runner.release();
    }
  });

  it('qwen3-shaped (tiny-qwen3, GGUF F32, head_dim 32 and q/k norms): greedy token for token', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'lora-qwen3-'));
    try {
      const file = join(dir, 'tiny-qwen3.gguf');
      writeLlamaGguf(file, presetGgufInput('tiny-qwen3', DEFAULT_SEED), 'F32');
      const folder = join(dir, 'tiny-qwen3');
      await runImportAsync(parseImportArgs(['gguf', file, '--out', folder]));
      writeTestAdapters(folder, 'tiny-qwen3');
      const bytes = new Uint8Array(readFileSync(file));
      const { header } = await readGgufHeader(bytes);
      const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as LlamaConfig;
      const weights = ggufWeights(bytes, header, PRESETS['tiny-qwen3']);
      const engine = await kernels(folder);
      try {
        const prompt = engine.tokenizer.encode(PROMPT);
        const base = new LlamaReference(config, weights).greedy(prompt, STEPS);
        for (const a of [TEST_ADAPTERS[0], TEST_ADAPTERS[3]]) {
          const want = new LlamaReference(config, merged(weights, config, a)).greedy(prompt, STEPS);
          expect(await greedy(engine, PROMPT, STEPS, await engine.loadAdapter(a.name)), a.name).toEqual(want);
          expect(want).not.toEqual(base);
        }
      } finally {
        await engine.runner.release();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.each(['fp32', 'int8', 'q4'] as const)('mixed batches on a %s base', (dtype) => {
  it("a base row's logits are the same bits beside adapter rows; an adapter row's alone and batched", async () => {
    const engine = await kernels(modelDir('tiny-lora'), { dtype });
    try {
      await expectMixedBatchExact(engine, await Promise.all(TEST_ADAPTERS.map((a) => engine.loadAdapter(a.name))));
    } finally {
      await engine.runner.release();
    }
  });
});

describe('the prefix cache and the LRU', () => {
  it('keys blocks by adapter: the same prompt shares blocks only with the same adapter', async () => {
    const engine = await kernels(modelDir('tiny-lora'));
    try {
      const qv = await engine.loadAdapter('qv-r8');
      const request = {
        prompt: 'a long prompt that fills several blocks of sixteen tokens each, and then some more',
        max_tokens: 2,
        temperature: 0,
      };
      const cached = async (adapter?: LoraAdapter) => {
        for await (const e of engine.generate(request, { adapter }))
          if (e.type === 'done') return e.metrics.cachedTokens;
        return -1;
      };
      expect(await cached()).toBe(0);
      expect(await cached(qv)).toBe(0);
      expect(await cached(qv)).toBeGreaterThan(0);
      expect(await cached(await engine.loadAdapter('all-r16'))).toBe(0);
      expect(await cached()).toBeGreaterThan(0);
    } finally {
      await engine.runner.release();
    }
  });

  it('evicts the least recently used past its bytes, and an evicted adapter reloads the same', async () => {
    // all-r16 holds 2 layers x (3 x 64 + 64 + 32 + 32 + 64 + 2 x 176 + 176 + 64) x 16 floats: about 150 KB.
    const engine = await kernels(modelDir('tiny-lora'), { adapterCacheBytes: 200_000 });
    try {
      const first = await engine.loadAdapter('all-r16');
      const tokens = await greedy(engine, PROMPT, 8, first);
      await engine.loadAdapter('attn-r12');
      await engine.loadAdapter('qv-r8');
      expect(engine.adapters.has('all-r16')).toBe(false);
      expect(engine.adapters.stats().evictions).toBeGreaterThan(0);
      expect(engine.adapters.stats().bytes).toBeLessThanOrEqual(200_000);
      const again = await engine.loadAdapter('all-r16');
      expect(again).not.toBe(first);
      expect(again.identity).toBe(first.identity);
      expect(await greedy(engine, PROMPT, 8, again)).toEqual(tokens);
    } finally {
      await engine.runner.release();
    }
  });
});

describe('bad adapters are refused at load, naming the file and the reason', () => {
  let dir: string;
  let engine: Engine;
  const good = TEST_ADAPTERS[0];
  const write = (name: string, config: unknown, weights?: Uint8Array): void => {
    const at = join(dir, 'adapters', name);
    mkdirSync(at, { recursive: true });
    writeFileSync(join(at, 'adapter_config.json'), typeof config === 'string' ? config : JSON.stringify(config));
    if (weights) writeFileSync(join(at, 'adapter_model.safetensors'), weights);
  };
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lora-bad-'));
    const base = modelDir('tiny-lora');
    for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'])
      cpSync(join(base, f), join(dir, f));
    mkdirSync(join(dir, 'onnx'));
    cpSync(join(base, 'onnx', 'model_q4.onnx'), join(dir, 'onnx', 'model_q4.onnx'));
    writeTestAdapters(dir, 'tiny-lora', [good]);
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, number>;
    const tensors = adapterTensors(config, good);
    const st = writeSafetensors(tensors);
    // The qwen3 shape's q_proj (head_dim 32): an adapter for another model of the same layers.
    const wide = new Map(tensors);
    wide.set('base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight', {
      dims: [128, good.rank],
      data: new Float32Array(128 * good.rank),
    });
    write('shape', adapterConfig(good, 'x'), writeSafetensors(wide));
    write('module', { ...adapterConfig(good, 'x'), target_modules: ['q_proj', 'lm_head'] }, st);
    write('rank', { ...adapterConfig(good, 'x'), r: 128 }, st);
    write('missing', adapterConfig(good, 'x'));
    write('truncated', adapterConfig(good, 'x'), st.subarray(0, st.length - 100));
    write('gpt2', { ...adapterConfig(good, 'x'), target_modules: ['c_attn'], fan_in_fan_out: false }, st);
    const foreign = new Map([
      ['base_model.model.transformer.h.0.attn.c_attn.lora_A.weight', { dims: [8, 64], data: new Float32Array(512) }],
    ]);
    write('gpt2-weights', { ...adapterConfig(good, 'x'), target_modules: 'all-linear' }, writeSafetensors(foreign));
    write('json', '{ not json', st);
    engine = await kernels(dir, { adapterCacheBytes: 1 << 20 });
  });
  afterAll(async () => {
    await engine?.runner.release();
    rmSync(dir, { recursive: true, force: true });
  });

  const cases: [string, string, string, RegExp][] = [
    ['shape', 'invalid_adapter', 'adapter_model.safetensors', /q_proj\.lora_B of shape \[128,8\].*needs \[64,8\]/],
    ['module', 'invalid_adapter', 'adapter_config.json', /targets lm_head, an unknown module/],
    ['rank', 'invalid_adapter', 'adapter_config.json', /rank r = 128, over the limit of 64/],
    ['missing', 'invalid_adapter', 'adapter_model.safetensors', /does not exist/],
    ['truncated', 'invalid_adapter', 'adapter_model.safetensors', /truncated/],
    ['gpt2', 'invalid_adapter', 'adapter_config.json', /c_attn, a module of another architecture/],
    ['gpt2-weights', 'invalid_adapter', 'adapter_model.safetensors', /not a LoRA weight of a Llama-family layer/],
    ['json', 'invalid_adapter', 'adapter_config.json', /is not JSON/],
    ['nowhere', 'model_not_found', 'adapter_config.json', /does not exist: no such model or adapter/],
  ];
  it.each(cases)('%s: %s', async (name, code, file, reason) => {
    const err = await engine.loadAdapter(name).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidRequestError);
    const { param, code: got, message } = err as InvalidRequestError;
    expect({ param, code: got }).toEqual({ param: 'model', code });
    expect(message).toContain(`adapters/${name}/${file}`);
    expect(message).toMatch(reason);
    // Nothing else is affected: the good adapter loads and serves.
    const adapter = await engine.loadAdapter(good.name);
    expect((await greedy(engine, PROMPT, 4, adapter)).length).toBe(4);
    expect(engine.adapters.has(name)).toBe(false);
  });

  it('a runner that cannot run adapters refuses them by name (onnxruntime)', async () => {
    const ort = await Engine.load(await nodeRuntime('cpu'), directorySource(modelDir('tiny-lora')), {
      dtype: 'fp32',
      kvCacheBytes: 1 << 20,
    });
    try {
      const err = (await ort.loadAdapter('qv-r8').catch((e: unknown) => e)) as InvalidRequestError;
      expect(err.code).toBe('unsupported_model');
      expect(err.message).toMatch(
        /run on the kernels \(whole or on pipeline stages\), the WGSL pass, and GPU hosts .*; this model runs on onnxruntime$/,
      );
    } finally {
      await ort.runner.release();
    }
  });
});

describe('npm run generate -- --lora DIR', () => {
  const generate = (...args: string[]) =>
    spawnSync('npx', ['tsx', 'scripts/generate.ts', '--model', modelDir('tiny-lora'), ...args], { encoding: 'utf8' });

  it("gives the adapter's greedy tokens (the reference's on the merged weights, as above), and refuses a bad one", async () => {
    const folder = modelDir('tiny-lora');
    const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as LlamaConfig;
    const weights = readOnnxWeights(new Uint8Array(readFileSync(join(folder, 'onnx', 'model.onnx'))));
    const a = TEST_ADAPTERS[1];
    const out = generate(
      ...['--dtype', 'fp32', '--lora', join(folder, 'adapters', a.name)],
      '--prompt',
      PROMPT,
      ...['--max-tokens', '12', '--temperature', '0', '--json'],
    );
    expect(out.status, out.stderr).toBe(0);
    const { prompt_ids: prompt, token_ids: tokens } = JSON.parse(out.stdout) as {
      prompt_ids: number[];
      token_ids: number[];
    };
    expect(tokens).toEqual(new LlamaReference(config, merged(weights, config, a)).greedy(prompt, 12));
    const bad = generate('--lora', join(folder, 'adapters', 'broken-rank'), '--prompt', 'x');
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--lora: .*adapter_config\.json has rank r = 128, over the limit of 64/);
  });
});

describe('sessions', () => {
  it("a session's kept cache continues only a turn with the same adapter", async () => {
    const engine = await kernels(modelDir('tiny-lora'));
    try {
      const qv = await engine.loadAdapter('qv-r8');
      const turn = async (prompt: string, adapter?: LoraAdapter) => {
        const request = { prompt, max_tokens: 6, temperature: 0, ignore_eos: true };
        for await (const e of engine.generate(request, { session: 's', adapter }))
          if (e.type === 'done') return { tokens: e.tokenIds, cached: e.metrics.cachedTokens };
        throw new Error('no done event');
      };
      const first = 'a first turn, long enough to keep a block or two of its cache for the next';
      await turn(first);
      const next = `${first} and a second`;
      const withAdapter = await turn(next, qv);
      expect(withAdapter.cached).toBe(0);
      expect(withAdapter.tokens).toEqual(await greedy(engine, next, 6, qv));
      expect((await turn(`${next} and a third`, qv)).cached).toBeGreaterThan(0);
    } finally {
      await engine.runner.release();
    }
  });
});

// The kernel runner (our WebAssembly forward pass) beyond reference parity (engine-parity.test.ts):
// batch invariance, prefix-cache invariance, quantised accuracy against onnxruntime on the same file,
// its footprint, and the fallback to onnxruntime for graphs the kernels do not cover.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { directorySource } from '../src/sources/directory-source.js';
import { fetchSource } from '../src/sources/fetch-source.js';
import { edgeKernelsModule } from '../src/backends/edge-kernels-node.js';
import { BlockPool } from '../src/engine/kv/block-pool.js';
import { KvCacheManager } from '../src/engine/kv/paged-kv.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mulberry32 } from './helpers/prng.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { ENGINE_DEFAULTS, resolveEngineLimits } from '../src/engine/defaults.js';
import { oneChunk } from '../src/engine/model/model-files.js';
import { MemoryBudget } from '../src/engine/runners/memory-budget.js';
import { KernelRunner } from '../src/engine/runners/wasm/kernel-runner.js';
import { KernelModel } from '../src/engine/runners/wasm/kernel-model.js';
import { PRESETS } from '../scripts/model/presets.js';
import { effectiveWeights } from '../scripts/model/weight-ops.js';
import { LlamaReference, type LlamaConfig } from './reference/llama-reference.js';
import { readOnnxWeights } from './reference/onnx-weights.js';
import { argmax, collect, loadEngine, modelDir, randomIds } from './helpers/engines.js';

const bits = (a: Float32Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

describe('kernel runner', () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await loadEngine('kernels', 'tiny', { autoRun: false, blockSize: 4 });
    expect(engine.runner).toBeInstanceOf(KernelRunner);
  });
  afterAll(() => engine.runner.release());

  /** Runs rows (fresh sequences, each prefilled with its prompt) in one pass; returns each row's last logits and frees them. */
  async function pass(
    prompts: number[][],
    feed: (kv: ReturnType<KvCacheManager['create']>, prompt: number[]) => number[] = (_, p) => p,
  ): Promise<string[]> {
    const kvs = prompts.map(() => engine.kv.create());
    try {
      const rows = prompts.map((p, i) => {
        const tokens = feed(kvs[i], p);
        expect(engine.kv.reserve(kvs[i], tokens.length)).toBe(true);
        return { kv: kvs[i], tokens };
      });
      const logits = await engine.runner.forward(rows);
      return rows.map((_, i) => bits(logits.last(i)));
    } finally {
      for (const kv of kvs) engine.kv.free(kv);
    }
  }

  it('gives a sequence bit-identical logits alone and in batches of any size, at any row', async () => {
    const target = randomIds(1, 23, 3, engine.samplableVocab);
    const [alone] = await pass([target]);
    for (const size of [2, 3, 5, 8, 13]) {
      for (const row of [0, Math.floor(size / 2), size - 1]) {
        const others = Array.from({ length: size - 1 }, (_, i) =>
          randomIds(100 + size * 10 + i, 1 + ((i * 7) % 40), 3, engine.samplableVocab),
        );
        const prompts = [...others.slice(0, row), target, ...others.slice(row)];
        expect((await pass(prompts))[row], `batch of ${size}, row ${row}`).toBe(alone);
      }
    }
  });

  it('gives bit-identical decode logits whatever the batch and whatever its neighbours feed', async () => {
    const prompt = randomIds(2, 30, 3, engine.samplableVocab);
    const decodeAfter = async (neighbours: number[][]): Promise<string> => {
      const kv = engine.kv.create();
      const extra = neighbours.map(() => engine.kv.create());
      try {
        engine.kv.reserve(kv, prompt.length + 1);
        await engine.runner.forward([{ kv, tokens: prompt }]);
        for (const [i, n] of neighbours.entries()) engine.kv.reserve(extra[i], n.length);
        const logits = await engine.runner.forward([
          ...neighbours.map((tokens, i) => ({ kv: extra[i], tokens })),
          { kv, tokens: [42] },
        ]);
        return bits(logits.last(neighbours.length));
      } finally {
        for (const k of [kv, ...extra]) engine.kv.free(k);
      }
    };
    const alone = await decodeAfter([]);
    expect(await decodeAfter([[7]])).toBe(alone);
    expect(await decodeAfter([randomIds(3, 100, 3, 400), [9], randomIds(4, 17, 3, 400)])).toBe(alone);
  });

  it('gives bit-identical logits whether the prefix came from the prefix cache or from its own prefill', async () => {
    const prompt = randomIds(5, 37, 3, engine.samplableVocab);
    // Fill the prefix cache with the prompt's full blocks, and keep them cached after freeing.
    const first = engine.kv.create();
    engine.kv.reserve(first, prompt.length);
    await engine.runner.forward([{ kv: first, tokens: prompt }]);
    engine.kv.commit(first, prompt);
    const [fresh] = await pass([prompt]);
    engine.kv.free(first);
    const [cached] = await pass([prompt], (kv, p) => {
      const hit = engine.kv.matchPrefix(kv, p);
      expect(hit).toBeGreaterThan(0);
      return p.slice(hit);
    });
    expect(cached).toBe(fresh);
  });

  it('feeds a prompt in chunks to the same logits as in one pass', async () => {
    const prompt = randomIds(6, 45, 3, engine.samplableVocab);
    const [whole] = await pass([prompt]);
    const kv = engine.kv.create();
    try {
      let logits: Float32Array | undefined;
      for (const [a, b] of [
        [0, 7],
        [7, 8],
        [8, 30],
        [30, 45],
      ]) {
        engine.kv.reserve(kv, b - a);
        logits = (await engine.runner.forward([{ kv, tokens: prompt.slice(a, b) }])).last(0);
      }
      expect(bits(logits!)).toBe(whole);
    } finally {
      engine.kv.free(kv);
    }
  });

  it('gives the logits of every fed position on demand, equal to feeding up to that position', async () => {
    const prompt = randomIds(7, 12, 3, engine.samplableVocab);
    const kv = engine.kv.create();
    engine.kv.reserve(kv, prompt.length);
    const logits = await engine.runner.forward([{ kv, tokens: prompt }]);
    const mid = bits(logits.at(0, 5).slice());
    engine.kv.free(kv);
    expect((await pass([prompt.slice(0, 6)]))[0]).toBe(mid);
  });

  it('holds weights, KV pool and scratch in one linear memory within weights + KV + 16 MiB', async () => {
    const runner = engine.runner as KernelRunner;
    const kvBytes = engine.stats().kv.bytesTotal;
    expect(runner.memoryBytes).toBeGreaterThanOrEqual(runner.weights.bytes + kvBytes);
    expect(runner.memoryBytes).toBeLessThanOrEqual(runner.weights.bytes + kvBytes + 16 * 2 ** 20);
    expect(engine.stats()).toMatchObject({ runner: 'kernels', wasmMemoryBytes: runner.memoryBytes });
  });
});

describe('quantised weights on the kernels against onnxruntime on the same file', () => {
  // The reference runs on the weights the file really holds (each matrix dequantised), so what remains
  // is each runtime's own arithmetic: ours quantises activations per block of 32 of their row;
  // onnxruntime-node's MatMulNBits at the file's accuracy_level 4 quantises them too.
  for (const dtype of ['int8', 'q4'] as const) {
    it(`${dtype}: relative logit error within 2% of onnxruntime's, teacher-forced greedy agreement within one step of it`, async () => {
      const config = JSON.parse(readFileSync(join(modelDir('tiny'), 'config.json'), 'utf8')) as LlamaConfig;
      const fp32 = readOnnxWeights(new Uint8Array(readFileSync(join(modelDir('tiny'), 'onnx', 'model.onnx'))));
      const ref = new LlamaReference(config, effectiveWeights(PRESETS.tiny, fp32, dtype));
      const measure = async (backend: 'kernels' | 'cpu') => {
        const engine = await loadEngine(backend, 'tiny', { dtype, autoRun: false });
        let err = 0;
        let norm = 0;
        let agree = 0;
        const steps = 48;
        try {
          for (const seed of [1, 2, 3]) {
            const prompt = randomIds(seed, 20, 3, engine.samplableVocab);
            ref.reset();
            const kv = engine.kv.create();
            let feed = prompt;
            let refLogits = ref.forward(prompt, 0).at(-1)!;
            for (let step = 0; step < steps / 3; step++) {
              engine.kv.reserve(kv, feed.length);
              const logits = (await engine.runner.forward([{ kv, tokens: feed }])).last(0);
              for (let i = 0; i < logits.length; i++) {
                err += (logits[i] - refLogits[i]) ** 2;
                norm += refLogits[i] ** 2;
              }
              const next = argmax(refLogits);
              if (argmax(logits) === next) agree++;
              feed = [next];
              refLogits = ref.forward(feed, prompt.length + step)[0];
            }
            engine.kv.free(kv);
          }
        } finally {
          await engine.runner.release();
        }
        return { relRms: Math.sqrt(err / norm), agreement: agree / steps };
      };
      const ours = await measure('kernels');
      const ort = await measure('cpu');
      console.log(
        `${dtype}: kernels rel. RMS ${ours.relRms.toExponential(2)}, agreement ${ours.agreement}; onnxruntime-node ${ort.relRms.toExponential(2)}, ${ort.agreement}`,
      );
      // onnxruntime's integer kernels differ by CPU (VNNI or not, AVX2 or NEON), so its figures are a yardstick
      // with a stated tolerance, never an exact bar: 2% more error, one teacher-forced decision in 48.
      expect(ours.relRms).toBeLessThanOrEqual(ort.relRms * 1.02);
      expect(ours.agreement).toBeGreaterThanOrEqual(ort.agreement - 1 / 48);
    });
  }
});

describe('weights found by what the graph does, not by their names', () => {
  // tiny's graph with its weights renamed (same lengths, so the protobuf stays valid): the kernels find each
  // one by walking the graph. Graphs they do not cover fall back or are refused: test/hub-exports.test.ts.
  const dir = mkdtempSync(join(tmpdir(), 'edge-infer-renamed-'));
  cpSync(modelDir('tiny'), dir, { recursive: true });
  const onnx = readFileSync(join(dir, 'onnx', 'model.onnx'));
  const renamed = onnx
    .toString('latin1')
    .replaceAll('model.norm.weight', 'model.norX.weight')
    .replaceAll('self_attn.q_proj.weight', 'self_attn.Q_proj.weight')
    .replaceAll('mlp.up_proj.weight', 'mlp.UP_proj.weight');
  writeFileSync(join(dir, 'onnx', 'model.onnx'), Buffer.from(renamed, 'latin1'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('run on the kernels with the same greedy tokens as the original', async () => {
    const other = await Engine.load(await nodeRuntime('kernels'), directorySource(dir));
    const ours = await loadEngine('kernels', 'tiny');
    expect(other.stats().runner).toBe('kernels');
    const request = { prompt: 'Hello there', max_tokens: 12, temperature: 0, ignore_eos: true };
    expect((await collect(other, request)).done.tokenIds).toEqual((await collect(ours, request)).done.tokenIds);
    await Promise.all([other.runner.release(), ours.runner.release()]);
  });
});

describe('loading the weights as a stream', () => {
  it('places the same weights, and gives the same logits, in chunks of any size as in one chunk', async () => {
    const config = (await loadEngine('kernels', 'tiny', { autoRun: false })).config;
    const file = new Uint8Array(readFileSync(join(modelDir('tiny'), 'onnx', 'model_int8.onnx')));
    const limits = resolveEngineLimits({});
    const load = async (chunks: AsyncIterable<Uint8Array>) =>
      KernelRunner.over(
        await KernelModel.fromStream(edgeKernelsModule(), { chunks }, config, {
          limits,
          budget: new MemoryBudget(config, ENGINE_DEFAULTS.kvCacheBytes, undefined),
        }),
        limits,
      );
    const whole = await load(oneChunk(file));
    // Chunks from 1 byte to 5 KB: every field, varint and tensor ends up split somewhere.
    async function* ragged(): AsyncGenerator<Uint8Array> {
      const next = mulberry32(9);
      for (let at = 0; at < file.length; ) {
        const n = 1 + Math.floor(next() ** 3 * 5000);
        yield file.slice(at, at + n);
        at += n;
      }
    }
    const streamed = await load(ragged());
    expect(streamed.weights.bytes).toBe(whole.weights.bytes);
    const prompt = randomIds(10, 20, 3, 500);
    const logits: string[] = [];
    for (const runner of [whole, streamed]) {
      runner.createKvMemory(config, 8, 16, 'fp32');
      const kv = new KvCacheManager(new BlockPool(config, 8, 16), 'stream-test');
      const seq = kv.create();
      kv.reserve(seq, prompt.length);
      logits.push(bits((await runner.forward([{ kv: seq, tokens: prompt }])).last(0)));
    }
    expect(logits[1]).toBe(logits[0]);
  });

  it("sizes attention's scores by the pool it is given: a longer pool than its limits said still runs to its end", async () => {
    // tiny: 512 B a token at fp32, 160 at int8. Limits of 32 KiB at fp32 bound a row at 80 tokens; the same
    // bytes at int8 hold 192, and their last passes score 32 queries against ~190 keys.
    const config = (await loadEngine('kernels', 'tiny', { autoRun: false })).config;
    const file = new Uint8Array(readFileSync(join(modelDir('tiny'), 'onnx', 'model_int8.onnx')));
    const run = async (kvDtype: 'fp32' | 'int8'): Promise<string> => {
      const limits = resolveEngineLimits({ kvCacheBytes: 32 * 1024, kvDtype, maxTokensPerStep: 64, maxBatchSize: 1 });
      const runner = KernelRunner.over(
        await KernelModel.fromStream(edgeKernelsModule(), { chunks: oneChunk(file) }, config, {
          limits,
          budget: new MemoryBudget(config, limits.kvCacheBytes, undefined),
        }),
        limits,
      );
      runner.createKvMemory(config, 12, 16, 'int8');
      const kv = new KvCacheManager(new BlockPool(config, 12, 16), 'pool-length-test');
      const seq = kv.create();
      const prompt = randomIds(11, 190, 3, 500);
      let last = '';
      for (let at = 0; at < prompt.length; at += 64) {
        const tokens = prompt.slice(at, at + 64);
        expect(kv.reserve(seq, tokens.length)).toBe(true);
        last = bits((await runner.forward([{ kv: seq, tokens }])).last(0));
      }
      await runner.release();
      return last;
    };
    expect(await run('fp32')).toBe(await run('int8'));
  });

  it('streams a model folder over real HTTP (fetchSource) to the reference greedy tokens, holding no second copy', async () => {
    const server = createServer((req, res) => {
      const path = join(modelDir('tiny'), decodeURIComponent(new URL(req.url!, 'http://x').pathname));
      try {
        const bytes = readFileSync(path);
        res.writeHead(200, { 'content-length': bytes.length }).end(bytes);
      } catch {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const engine = await Engine.load(await nodeRuntime('wasm'), fetchSource(globalThis, `http://127.0.0.1:${port}/`));
      expect(engine.stats().runner).toBe('kernels');
      const ref = await (await import('./reference/load-reference.js')).loadReference(modelDir('tiny'));
      const prompt = engine.tokenizer.encode('Hello');
      expect(
        (await collect(engine, { prompt_ids: prompt, max_tokens: 16, temperature: 0, ignore_eos: true })).done.tokenIds,
      ).toEqual(ref.greedy(prompt, 16));
      await engine.runner.release();
    } finally {
      server.close();
    }
  });
});

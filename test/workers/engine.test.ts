// The engine inside workerd on both wasm runners, our edge kernels and onnxruntime-web (through the
// precompiled-module route), loading the generated model through the static-assets binding: same greedy
// tokens as in Node, same seeded tokens as the same runner in Node, and the reference forward pass
// agrees with it in workerd too.
import { env } from 'cloudflare:workers';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { workerdWasmRuntime } from '../../src/backends/ort-web-workerd.js';
import { Engine } from '../../src/engine/engine.js';
import { fetchSource } from '../../src/sources/fetch-source.js';
import { LlamaReference, type LlamaConfig } from '../reference/llama-reference.js';
import { readOnnxWeights } from '../reference/onnx-weights.js';
import { WORKERD_CASES } from './cases.js';

const source = () => fetchSource(env.MODELS, 'http://models.local/tiny/');

async function collectTokens(engine: Engine, name: string): Promise<number[]> {
  for await (const event of engine.generate(WORKERD_CASES[name])) if (event.type === 'done') return event.tokenIds;
  throw new Error('no done event');
}

for (const runner of ['kernels', 'onnxruntime'] as const) {
  const inNode = runner === 'kernels' ? 'kernels' : 'ort-wasm';
  describe(`engine in workerd on ${runner}`, () => {
    let engine: Engine;
    beforeAll(async () => {
      engine = await Engine.load(workerdWasmRuntime(runner), source());
    });

    it('runs on the wasm backend with the runner asked for', () => {
      expect(engine.backend).toBe('wasm');
      expect(engine.stats().runner).toBe(runner);
      expect(typeof navigator === 'undefined' || !('gpu' in navigator)).toBe(true);
    });

    it('gives the same greedy tokens as the engine in Node (native CPU and the same runner)', async () => {
      const expected = inject('nodeExpectations');
      for (const name of ['greedy', 'greedyChat']) {
        const tokens = await collectTokens(engine, name);
        expect(tokens).toEqual(expected.cpu[name]);
        expect(tokens).toEqual(expected[inNode][name]);
      }
    });

    it('gives the same seeded samples as the same runner in Node', async () => {
      expect(await collectTokens(engine, 'seeded')).toEqual(inject('nodeExpectations')[inNode].seeded);
    });

    it('matches the reference forward pass run inside workerd', async () => {
      const src = source();
      const config = JSON.parse(new TextDecoder().decode((await src.read('config.json'))!)) as LlamaConfig;
      const ref = new LlamaReference(config, readOnnxWeights((await src.read('onnx/model.onnx'))!));
      const prompt = engine.tokenizer.encode('Hello');
      expect(await collectTokens(engine, 'greedy')).toEqual(ref.greedy(prompt, 32));
    });
  });
}

describe('engine in workerd on the kernels with an 8-bit KV pool (KV_DTYPE int8)', () => {
  it('gives every case the tokens the same pool gives in Node', async () => {
    const engine = await Engine.load(workerdWasmRuntime('kernels'), source(), { kvDtype: 'int8' });
    const expected = inject('nodeInt8Kv');
    for (const name of Object.keys(WORKERD_CASES))
      expect(await collectTokens(engine, name), name).toEqual(expected[name]);
    await engine.runner.release();
  });
});

// The webgpu backend (onnxruntime-web's WebGPU EP on Dawn; lavapipe here) end to end: the same greedy
// tokens as wasm, token for token, the same seeded samples, and logits within a stated tolerance of
// the independent float64 reference after prefill and each decode step.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import { loadReference } from '../reference/load-reference.js';
import type { LlamaReference } from '../reference/llama-reference.js';
import { argmax, collect, loadEngine, maxAbsDiff, modelDir, randomIds } from '../helpers/engines.js';
import { gpu, skipNote } from './gpu.js';

// Measured on lavapipe: 4-7e-5 (float32 kernels summing in other orders than the float64 reference).
const WEBGPU_TOLERANCE = 1e-4;
const STEPS = 24;

describe.skipIf(!gpu)(`tiny on webgpu${skipNote}`, () => {
  let webgpu: Engine;
  let wasm: Engine;
  let ref: LlamaReference;
  beforeAll(async () => {
    webgpu = await loadEngine('webgpu', 'tiny');
    wasm = await loadEngine('wasm', 'tiny');
    ref = await loadReference(modelDir('tiny'));
  });
  afterAll(async () => {
    await webgpu?.runner.release();
    await wasm?.runner.release();
  });

  const prompts = (): number[][] => [webgpu.tokenizer.encode('Hello'), randomIds(11, 37, 3, webgpu.samplableVocab)];

  it('reports its backend', () => {
    expect(webgpu.backend).toBe('webgpu');
  });

  it(`matches the reference logits within ${WEBGPU_TOLERANCE} after prefill and each of ${STEPS} decode steps`, async () => {
    for (const prompt of prompts()) {
      ref.reset();
      const kv = webgpu.kv.create();
      let worst = 0;
      try {
        let feed = prompt;
        let refLogits = ref.forward(prompt, 0).at(-1)!;
        for (let step = 0; step <= STEPS; step++) {
          expect(webgpu.kv.reserve(kv, feed.length)).toBe(true);
          const logits = (await webgpu.runner.forward([{ kv, tokens: feed }])).last(0);
          worst = Math.max(worst, maxAbsDiff(logits, refLogits));
          expect(argmax(logits), `greedy decision at step ${step}`).toBe(argmax(refLogits));
          feed = [argmax(refLogits)];
          refLogits = ref.forward(feed, prompt.length + step)[0];
        }
      } finally {
        webgpu.kv.free(kv);
      }
      expect(worst, 'max |webgpu - reference| logit').toBeLessThan(WEBGPU_TOLERANCE);
    }
  });

  it('generates the same greedy tokens as wasm, token for token', async () => {
    for (const prompt of prompts()) {
      const request = { prompt_ids: prompt, max_tokens: STEPS, temperature: 0, ignore_eos: true };
      const [a, b] = [await collect(webgpu, request), await collect(wasm, request)];
      expect(a.done.tokenIds).toEqual(b.done.tokenIds);
      expect(new Set(a.done.tokenIds).size, 'not one token repeated').toBeGreaterThan(1);
    }
  });

  it('draws the same seeded samples as wasm, batched', async () => {
    const request = (seed: number) => ({
      prompt: 'Once',
      max_tokens: 16,
      temperature: 0.9,
      top_p: 0.95,
      seed,
      ignore_eos: true,
    });
    const onGpu = await Promise.all([1, 2, 3].map((seed) => collect(webgpu, request(seed))));
    const onWasm = await Promise.all([1, 2, 3].map((seed) => collect(wasm, request(seed))));
    expect(onGpu.map((r) => r.done.tokenIds)).toEqual(onWasm.map((r) => r.done.tokenIds));
    expect(new Set(onGpu.map((r) => r.done.tokenIds.join())).size, 'seeds give different samples').toBe(3);
  });

  it('keeps its KV cache on the device, and speculation and beam search on it give the wasm tokens', async () => {
    expect(webgpu.runner.constructor.name).toBe('GpuRunner');
    const phrase = randomIds(5, 6, 3, webgpu.samplableVocab);
    const base = { prompt_ids: [...phrase, ...phrase, ...phrase], max_tokens: 12, temperature: 0, ignore_eos: true };
    const speculated = await collect(webgpu, { ...base, speculative: { method: 'ngram', num_tokens: 3 } });
    expect(speculated.done.tokenIds).toEqual((await collect(wasm, base)).done.tokenIds);
    const beam = { ...base, max_tokens: 5, use_beam_search: true, beam_width: 3, n: 2 };
    const beams = async (e: Engine) => {
      const out: number[][] = [];
      for await (const event of e.generate(beam)) if (event.type === 'done') out.push(event.tokenIds);
      return out;
    };
    expect(await beams(webgpu)).toEqual(await beams(wasm));
    expect(webgpu.stats().kv.used).toBe(0);
  });

  it('samples on the device beside rows that need their logits on the CPU, with the wasm tokens', async () => {
    expect(webgpu.runner.deviceSampling, 'the runner draws on the device').toBeDefined();
    const phrase = randomIds(8, 5, 3, webgpu.samplableVocab);
    const requests = [
      {
        prompt: 'Once',
        max_tokens: 10,
        temperature: 0.8,
        top_k: 40,
        presence_penalty: 0.5,
        seed: 11,
        n: 2,
        ignore_eos: true,
      },
      {
        prompt_ids: [...phrase, ...phrase],
        max_tokens: 10,
        temperature: 0,
        ignore_eos: true,
        speculative: { method: 'ngram' as const, num_tokens: 2 },
      },
      {
        prompt: 'Hello',
        max_tokens: 6,
        temperature: 0,
        frequency_penalty: 1,
        logprobs: true,
        top_logprobs: 2,
        ignore_eos: true,
      },
    ];
    const all = async (e: Engine) =>
      Promise.all(
        requests.map(async (r) => {
          const out: number[][] = [];
          for await (const event of e.generate(r)) if (event.type === 'done') out[event.index] = event.tokenIds;
          return out;
        }),
      );
    expect(await all(webgpu)).toEqual(await all(wasm));
    expect(webgpu.stats().kv.used).toBe(0);
  });
});

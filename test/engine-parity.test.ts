// The engine against the independent reference forward pass (test/reference), on both Node backends:
// logits after prefill and after every decode step within 1e-4 (fp32), greedy tokens identical.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import type { LlamaReference } from './reference/llama-reference.js';
import { loadReference } from './reference/load-reference.js';
import { argmax, collect, loadEngine, maxAbsDiff, modelDir, randomIds, topGap } from './helpers/engines.js';

const FP32_TOLERANCE = 1e-4;
const STEPS = 32;

/** Teacher-forced run: the engine follows the reference's greedy tokens; returns the worst logit gap seen. */
async function compareLogits(
  engine: Engine,
  ref: LlamaReference,
  prompt: number[],
): Promise<{ maxDiff: number; relRms: number; minGap: number; agree: boolean }> {
  ref.reset();
  const kv = engine.kv.create();
  let maxDiff = 0;
  let squaredError = 0;
  let squaredRef = 0;
  let minGap = Infinity;
  let agree = true;
  try {
    let feed = prompt;
    let refLogits = ref.forward(prompt, 0).at(-1)!;
    for (let step = 0; step <= STEPS; step++) {
      expect(engine.kv.reserve(kv, feed.length)).toBe(true);
      const logits = (await engine.runner.forward([{ kv, tokens: feed }])).last(0);
      maxDiff = Math.max(maxDiff, maxAbsDiff(logits, refLogits));
      for (let i = 0; i < logits.length; i++) {
        squaredError += (logits[i] - refLogits[i]) ** 2;
        squaredRef += refLogits[i] ** 2;
      }
      minGap = Math.min(minGap, topGap(refLogits));
      const next = argmax(refLogits);
      agree &&= argmax(logits) === next;
      feed = [next];
      refLogits = ref.forward(feed, prompt.length + step)[0];
    }
  } finally {
    engine.kv.free(kv);
  }
  return { maxDiff, relRms: Math.sqrt(squaredError / squaredRef), minGap, agree };
}

// kernels: our WebAssembly forward pass; ort-wasm: onnxruntime-web (what `wasm` falls back to).
for (const backend of ['cpu', 'kernels', 'ort-wasm'] as const) {
  for (const model of ['tiny', 'tiny-untied']) {
    describe(`${model} on ${backend}`, () => {
      let engine: Engine;
      let ref: LlamaReference;
      beforeAll(async () => {
        engine = await loadEngine(backend, model);
        ref = await loadReference(modelDir(model));
      });
      afterAll(() => engine.runner.release());

      const prompts = (): [string, number[]][] => [
        ['"Hello"', engine.tokenizer.encode('Hello')],
        ['40 random ids', randomIds(7, 40, 3, engine.samplableVocab)],
      ];

      it('matches the reference logits after prefill and each of 32 decode steps', async () => {
        for (const [name, prompt] of prompts()) {
          const { maxDiff, minGap, agree } = await compareLogits(engine, ref, prompt);
          expect(maxDiff, `${name}: max |engine - reference| logit`).toBeLessThan(FP32_TOLERANCE);
          // Greedy comparisons mean something only if the model is far from ties (see docs/platform.md).
          expect(minGap, `${name}: smallest top-1/top-2 logit gap`).toBeGreaterThan(1e-3);
          expect(agree).toBe(true);
        }
      });

      it('generates the reference greedy tokens', async () => {
        for (const [, prompt] of prompts()) {
          const expected = ref.greedy(prompt, STEPS);
          const { done } = await collect(engine, {
            prompt_ids: prompt,
            max_tokens: STEPS,
            temperature: 0,
            ignore_eos: true,
          });
          expect(done.tokenIds).toEqual(expected);
          expect(new Set(done.tokenIds).size, 'greedy output is not one token repeated').toBeGreaterThan(1);
        }
      });
    });
  }
}

describe('quantised variants against the fp32 reference', () => {
  // Weight-only quantisation perturbs logits, and this random, very peaked network amplifies weight
  // error (logit std ~8): relative RMS error of the logits, measured on tiny, is ~1.3e-3 (fp16),
  // ~0.03-0.04 (int8) and ~0.45 (q4, which is effectively another model). The bounds below hold with
  // margin and still catch a wrong scale, block layout or zero point, which give errors of order 1.
  const tolerances = { fp16: 5e-3, int8: 0.08, q4: 0.7 } as const;
  for (const [dtype, tolerance] of Object.entries(tolerances)) {
    it(`${dtype}: relative RMS logit error below ${tolerance} over 32 teacher-forced steps (cpu, kernels, ort-wasm)`, async () => {
      const ref = await loadReference(modelDir('tiny'));
      for (const backend of ['cpu', 'kernels', 'ort-wasm'] as const) {
        const engine = await loadEngine(backend, 'tiny', { dtype: dtype as 'fp16' | 'int8' | 'q4' });
        const { relRms, agree } = await compareLogits(engine, ref, engine.tokenizer.encode('Hello'));
        expect(relRms, `${dtype} on ${backend}`).toBeLessThan(tolerance);
        if (dtype === 'fp16') expect(agree, 'fp16 keeps every greedy decision').toBe(true);
        await engine.runner.release();
      }
    });
  }
});

// The floor of overhead: a bare onnxruntime greedy loop over the same ONNX file the engine runs.
// Batch 1, no KV pool, no scheduler, no sampler: each step feeds the previous step's `present`
// tensors back as `past_key_values` and takes the argmax of the last logits.
import type { ModelConfig } from '../../src/engine/model/config.js';
import type { EngineRuntime, OrtSession, OrtTensor } from '../../src/engine/model/runtime.js';

export interface BareLoop {
  /** Greedy generation of `tokens` tokens after `prompt`; times of the first token and of the last. */
  generate(
    prompt: readonly number[],
    tokens: number,
  ): Promise<{ ids: number[]; ttftMs: number; decodeTokensPerS: number }>;
  release(): Promise<void>;
}

/** `samplable`: argmax over the ids the tokenizer knows, as the engine's greedy sampler does. */
export async function createBareLoop(
  runtime: EngineRuntime,
  onnx: Uint8Array,
  config: ModelConfig,
  samplable = config.vocabSize,
): Promise<BareLoop> {
  const session: OrtSession = await runtime.InferenceSession.create(onnx, {
    executionProviders: runtime.executionProviders,
    graphOptimizationLevel: 'all',
    intraOpNumThreads: 1,
  });
  const { Tensor } = runtime;
  const { numLayers, numKvHeads, headDim, vocabSize } = config;

  const argmaxLast = (logits: Float32Array): number => {
    const base = logits.length - vocabSize;
    let best = 0;
    for (let i = 1; i < samplable; i++) if (logits[base + i] > logits[base + best]) best = i;
    return best;
  };

  return {
    async generate(prompt, tokens) {
      const t0 = performance.now();
      const ids: number[] = [];
      let past: Record<string, OrtTensor> = {};
      for (let l = 0; l < numLayers; l++) {
        const empty = new Float32Array(0);
        past[`past_key_values.${l}.key`] = new Tensor('float32', empty, [1, numKvHeads, 0, headDim]);
        past[`past_key_values.${l}.value`] = new Tensor('float32', empty, [1, numKvHeads, 0, headDim]);
      }
      let feed: readonly number[] = prompt;
      let length = 0;
      let tFirst = 0;
      for (let step = 0; step < tokens; step++) {
        const s = feed.length;
        const out = await session.run({
          input_ids: new Tensor('int64', BigInt64Array.from(feed, BigInt), [1, s]),
          attention_mask: new Tensor('int64', new BigInt64Array(length + s).fill(1n), [1, length + s]),
          position_ids: new Tensor(
            'int64',
            BigInt64Array.from({ length: s }, (_, i) => BigInt(length + i)),
            [1, s],
          ),
          ...past,
        });
        const next = argmaxLast(out.logits.data as Float32Array);
        ids.push(next);
        if (step === 0) tFirst = performance.now();
        past = {};
        for (let l = 0; l < numLayers; l++) {
          past[`past_key_values.${l}.key`] = out[`present.${l}.key`];
          past[`past_key_values.${l}.value`] = out[`present.${l}.value`];
        }
        length += s;
        feed = [next];
      }
      const tEnd = performance.now();
      return { ids, ttftMs: tFirst - t0, decodeTokensPerS: ((tokens - 1) * 1000) / (tEnd - tFirst) };
    },
    release: () => session.release(),
  };
}

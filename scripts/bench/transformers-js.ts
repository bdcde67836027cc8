// transformers.js (@huggingface/transformers) as a peer: greedy generation of the same prompt ids, to
// the same length, on the same ONNX file. `cpu` runs it on onnxruntime-node; `wasm` on our
// onnxruntime-web, which it picks up from globalThis[Symbol.for('onnxruntime')] when that is set before
// it is first imported (it refuses device 'wasm' under Node otherwise; see docs/platform.md). Imported only
// here, by the bench, never by tests.
import { dirname } from 'node:path';
import type { ModelDtype } from '../../src/engine/model/model-files.js';
import type { Backend } from './options.js';

export interface TransformersJsPeer {
  generate(
    prompt: readonly number[],
    tokens: number,
  ): Promise<{ ids: number[]; ttftMs: number; decodeTokensPerS: number }>;
  release(): Promise<void>;
}

type TjsModule = typeof import('@huggingface/transformers');
let loaded: Promise<TjsModule> | undefined;

async function transformersFor(backend: Backend): Promise<TjsModule> {
  if (backend === 'wasm') {
    // The same module object our wasm runtime configured (wasmPaths, one thread, no proxy).
    const ort = await import('onnxruntime-web');
    (globalThis as Record<symbol, unknown>)[Symbol.for('onnxruntime')] = ort;
  }
  loaded ??= import('@huggingface/transformers');
  const tjs = await loaded;
  tjs.env.allowRemoteModels = false;
  tjs.env.allowLocalModels = true;
  return tjs;
}

export async function createTransformersJsPeer(
  backend: Backend,
  modelDir: string,
  dtype: ModelDtype,
): Promise<TransformersJsPeer> {
  const tjs = await transformersFor(backend);
  tjs.env.localModelPath = `${dirname(modelDir)}/`;
  const name = modelDir.slice(dirname(modelDir).length + 1);
  const model = await tjs.AutoModelForCausalLM.from_pretrained(name, {
    local_files_only: true,
    // transformers.js names the same files: 'quantized' is its name for model_quantized.onnx.
    dtype: dtype as 'fp32' | 'fp16' | 'int8' | 'q4' | 'q4f16' | 'uint8' | 'bnb4',
    ...(backend === 'cpu'
      ? { device: 'cpu' as const, session_options: { intraOpNumThreads: 1, graphOptimizationLevel: 'all' as const } }
      : {
          device: 'auto' as const,
          session_options: { executionProviders: ['wasm'], graphOptimizationLevel: 'all' as const },
        }),
  });

  /** Notes the time of every token generate() emits (the prompt is put first, then one token a step). */
  class Clock extends tjs.BaseStreamer {
    times: number[] = [];
    private seenPrompt = false;
    override put(): void {
      if (!this.seenPrompt) this.seenPrompt = true;
      else this.times.push(performance.now());
    }
    override end(): void {}
  }

  return {
    async generate(prompt, tokens) {
      const clock = new Clock();
      const ids = new tjs.Tensor('int64', BigInt64Array.from(prompt, BigInt), [1, prompt.length]);
      const mask = new tjs.Tensor('int64', new BigInt64Array(prompt.length).fill(1n), [1, prompt.length]);
      const t0 = performance.now();
      const out = (await model.generate({
        input_ids: ids,
        attention_mask: mask,
        max_new_tokens: tokens,
        min_new_tokens: tokens,
        do_sample: false,
        streamer: clock as unknown as InstanceType<TjsModule['TextStreamer']>,
      })) as InstanceType<TjsModule['Tensor']>;
      const all = Array.from(out.data as BigInt64Array, Number);
      const t = clock.times;
      if (t.length !== tokens) throw new Error(`transformers.js streamed ${t.length} tokens, expected ${tokens}`);
      return {
        ids: all.slice(prompt.length),
        ttftMs: t[0] - t0,
        decodeTokensPerS: ((tokens - 1) * 1000) / (t[tokens - 1] - t[0]),
      };
    },
    release: async () => void (await model.dispose()),
  };
}

import type { GenerationRequest } from '../../src/engine/request.js';
import type { DotLowering } from '../../src/engine/runners/wasm/dot-lowering.js';

/** Requests run both in Node (global setup) and inside workerd, whose outputs must agree. */
export const WORKERD_CASES: Record<string, GenerationRequest> = {
  greedy: { prompt: 'Hello', max_tokens: 32, temperature: 0, ignore_eos: true },
  greedyChat: {
    messages: [{ role: 'user', content: 'What is the capital of France?' }],
    max_tokens: 24,
    temperature: 0,
    ignore_eos: true,
  },
  seeded: {
    prompt: 'Once upon a time',
    max_tokens: 32,
    temperature: 0.9,
    top_k: 50,
    top_p: 0.95,
    seed: 7,
    ignore_eos: true,
  },
};

/** GGUF folders under models/ the workerd tests load: (folder, preset, file type). */
export const GGUF_FOLDERS = [
  ['tiny-gguf', 'tiny-256', 'Q4_K_M'],
  ['tiny-qwen2-gguf', 'tiny-qwen2', 'Q8_0'],
  ['tiny-qwen3-gguf', 'tiny-qwen3', 'Q8_0'],
  ['tiny-gemma3-gguf', 'tiny-gemma3', 'Q8_0'],
] as const;

/** Generated token ids per backend and case. */
/** Tokens each case gives in Node on onnxruntime-node, our kernels and onnxruntime-web. */
export type NodeExpectations = Record<'cpu' | 'kernels' | 'ort-wasm', Record<string, number[]>>;

declare module 'vitest' {
  export interface ProvidedContext {
    nodeExpectations: NodeExpectations;
    /** kernelProbe (test/helpers/kernel-probe.ts) in Node, per kernels build. */
    nodeKernelProbe: Record<string, Record<string, number[]>>;
    /** How Node's V8 lowers the dot-add build's int32 dot product (which of its products are exact there). */
    nodeDotLowering: DotLowering;
    /** The greedy case on each of GGUF_FOLDERS on the kernels in Node, by folder. */
    nodeGgufGreedy: Record<string, number[]>;
    /** Every case on the kernels in Node with an 8-bit KV pool (KV_DTYPE int8). */
    nodeInt8Kv: Record<string, number[]>;
  }
}

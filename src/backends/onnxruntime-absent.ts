import type { EngineRuntime } from '../engine/model/runtime.js';

/**
 * Stands in for onnxruntime-web in a build that leaves its 14 MB WebAssembly binary out of the worker
 * (wrangler `--alias onnxruntime-web/wasm:./src/backends/onnxruntime-absent.ts` and the same for
 * `onnxruntime-web/ort-wasm-simd-threaded.wasm`): the default export is no module, and a graph the edge
 * kernels do not cover is refused by name instead of run.
 */
export default undefined as unknown as WebAssembly.Module;

export const InferenceSession = {
  create(): never {
    throw new Error(
      'onnxruntime-web is not part of this build (kernels-only): only graphs the edge kernels cover can be served',
    );
  },
};
export const Tensor = undefined as unknown as EngineRuntime['Tensor'];
export const env = { wasm: {} };

/** The runtime a kernels-only build hands the engine. */
export function absentOrt(): EngineRuntime {
  return { name: 'wasm', InferenceSession, Tensor, executionProviders: ['wasm'], hasOnnxruntime: false };
}

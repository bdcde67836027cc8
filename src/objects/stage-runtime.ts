import { absentOrt } from '../backends/onnxruntime-absent.js';
// Precompiled by wrangler, like the head's (src/backends/ort-web-workerd.ts). A relaxed build only, the one this
// host runs faster: a stage runs every graph on it (StageServer reads `kernels`), and every build gives the same bits
// where it runs (relaxed-kernels-workerd.ts).
import { relaxedKernelsForThisHost } from '../backends/relaxed-kernels-workerd.js';
import type { EngineRuntime } from '../engine/model/runtime.js';
import { requireWasmBackend, runnerChoice, type Env } from '../env.js';

/**
 * A stage Worker's runtime: the edge kernels and nothing else. A stage runs its layers on the kernels only, so
 * its script imports neither onnxruntime-web (14 MB of WebAssembly) nor xgrammar's; the upload stays small.
 * BACKEND is read as the head reads it: `webgpu` is refused by name, `ort-wasm` leaves the stage no kernels
 * (StageServer refuses it).
 */
export function stageRuntime(env: Env): EngineRuntime {
  requireWasmBackend(env);
  const runner = runnerChoice(env);
  return { ...absentOrt(), kernels: runner === 'onnxruntime' ? undefined : relaxedKernelsForThisHost(), runner };
}

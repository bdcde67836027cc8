import { workerdWasmRuntime } from '../backends/ort-web-workerd.js';
import type { EngineRuntime } from '../engine/model/runtime.js';
import { requireWasmBackend, runnerChoice, type Env } from '../env.js';

/**
 * The ONNX runtime an inference object runs its engine on, from the BACKEND var: WASM inside workerd
 * (`requireWasmBackend` refuses a forced `webgpu` by name).
 */
export function shardRuntime(env: Env): EngineRuntime {
  requireWasmBackend(env);
  return workerdWasmRuntime(runnerChoice(env));
}

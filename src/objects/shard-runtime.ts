import { workerdWasmRuntime } from '../backends/ort-web-workerd.js';
import { InvalidRequestError } from '../engine/errors.js';
import type { OrtRuntime } from '../engine/model/runtime.js';
import { backendVar, hostHasWebGpu, runnerChoice, serviceBackend, type Env } from '../env.js';

/**
 * The ONNX runtime an inference object runs its engine on, from the BACKEND var. Inside workerd that is
 * WASM: `auto` resolves to it (no navigator.gpu), and a forced `webgpu` cannot load, which the object
 * reports as a 503 naming the reason (InvalidRequestError is how a model that cannot be served is told).
 */
export function shardRuntime(env: Env): OrtRuntime {
  if (serviceBackend(env) === 'webgpu') {
    throw new InvalidRequestError(
      'BACKEND',
      hostHasWebGpu()
        ? "BACKEND=webgpu: onnxruntime-web's WebGPU build is not wired into workerd yet; use auto or wasm"
        : `BACKEND=${backendVar(env)} but this host has no WebGPU (navigator.gpu); use auto or wasm`,
      'backend_unavailable',
    );
  }
  return workerdWasmRuntime(runnerChoice(env));
}

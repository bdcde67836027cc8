import * as ort from 'onnxruntime-web/webgpu';
import type { OrtRuntime } from '../engine/model/runtime.js';
import type { GpuContext } from '../engine/gpu/device.js';

/** An ORT runtime whose sessions run on `gpu.device`, the device our own kernels use too. */
export interface WebGpuRuntime extends OrtRuntime {
  readonly name: 'webgpu';
  readonly gpu: GpuContext;
}

export function isWebGpuRuntime(runtime: OrtRuntime): runtime is WebGpuRuntime {
  return runtime.name === 'webgpu' && 'gpu' in runtime;
}

/**
 * onnxruntime-web's WebGPU execution provider on a device we created (handed over in the EP options),
 * so tensors ORT leaves on the GPU (`preferredOutputLocation: 'gpu-buffer'`) and buffers our kernels
 * write (`Tensor.fromGpuBuffer`) live on one device. `wasmPaths` is where the loader finds its .wasm
 * when import.meta.url does not lead there (Node under a module runner).
 */
export function webGpuRuntime(gpu: GpuContext, options: { wasmPaths?: string } = {}): WebGpuRuntime {
  if (options.wasmPaths) ort.env.wasm.wasmPaths = options.wasmPaths;
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  ort.env.webgpu.adapter = gpu.adapter;
  // ORT warns on every session that shape ops run on the CPU, which is by design; errors still show.
  ort.env.logLevel = 'error';
  return {
    name: 'webgpu',
    gpu,
    InferenceSession: ort.InferenceSession,
    Tensor: ort.Tensor,
    executionProviders: [{ name: 'webgpu', device: gpu.device } as unknown as ort.InferenceSession.WebGpuExecutionProviderOption],
  };
}

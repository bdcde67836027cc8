import * as ort from 'onnxruntime-web/webgpu';
import type { GpuContext } from '../engine/runners/webgpu/device.js';
import { deviceRunners } from '../engine/runners/webgpu/device-runners.js';
import type { GpuRuntime } from '../engine/runners/webgpu/gpu-runtime.js';
import type { ShaderSource } from '../engine/runners/webgpu/wgsl-kernels.js';

export type WebGpuRuntime = GpuRuntime;

/**
 * onnxruntime-web's WebGPU execution provider on a device we created (handed over in the EP options),
 * so tensors ORT leaves on the GPU (`preferredOutputLocation: 'gpu-buffer'`) and buffers our kernels
 * write (`Tensor.fromGpuBuffer`) live on one device. `wasmPaths` is where the loader finds its .wasm
 * when import.meta.url does not lead there (Node under a module runner).
 */
export function webGpuRuntime(
  gpu: GpuContext,
  shaders: ShaderSource,
  options: { wasmPaths?: string } = {},
): WebGpuRuntime {
  if (options.wasmPaths) ort.env.wasm.wasmPaths = options.wasmPaths;
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  ort.env.webgpu.adapter = gpu.adapter;
  // ORT warns on every session that shape ops run on the CPU, which is by design; errors still show.
  ort.env.logLevel = 'error';
  return {
    name: 'webgpu',
    gpu,
    shaders,
    devices: deviceRunners,
    InferenceSession: ort.InferenceSession,
    Tensor: ort.Tensor,
    executionProviders: [
      { name: 'webgpu', device: gpu.device } as unknown as ort.InferenceSession.WebGpuExecutionProviderOption,
    ],
  };
}

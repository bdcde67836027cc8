import type { ModelConfig } from '../../model/config.js';
import type { ByteStream } from '../../model/model-files.js';
import type { EngineRuntime } from '../../model/runtime.js';
import type { MemoryBudget } from '../memory-budget.js';
import type { LoadedRunner, RunnerOptions } from '../runner-options.js';
import type { GpuContext } from './device.js';
import type { ShaderSource } from './wgsl-kernels.js';

/**
 * An ORT runtime on WebGPU, as the engine sees it: sessions run on `gpu.device`, the device our own
 * kernels (read through `shaders`) use too, and `devices` loads runners that keep the model there.
 * Built by src/backends/ort-webgpu.ts.
 */
export interface GpuRuntime extends EngineRuntime {
  readonly name: 'webgpu';
  readonly gpu: GpuContext;
  readonly shaders: ShaderSource;
  readonly devices: DeviceRunners;
}

/** The loaders of runners on the device (webgpu/device-runners.ts), carried by the runtime that has one. */
export interface DeviceRunners {
  /** Our WGSL pass over a GGUF file or an ONNX graph the kernels' loader covers. */
  wgsl(
    runtime: GpuRuntime,
    kernels: WebAssembly.Module,
    stream: ByteStream,
    config: ModelConfig,
    options: RunnerOptions,
    budget: MemoryBudget,
    gguf: boolean,
  ): Promise<LoadedRunner>;
  /** onnxruntime's WebGPU provider with the KV pool on the device; undefined where the graph does not allow it. */
  onnx(
    runtime: GpuRuntime,
    onnx: Uint8Array,
    config: ModelConfig,
    options: RunnerOptions,
    budget: MemoryBudget,
  ): Promise<LoadedRunner | undefined>;
}

export function isGpuRuntime(runtime: EngineRuntime): runtime is GpuRuntime {
  return runtime.name === 'webgpu' && 'gpu' in runtime && 'shaders' in runtime && 'devices' in runtime;
}

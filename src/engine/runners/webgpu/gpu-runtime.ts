import type { EngineRuntime } from '../../model/runtime.js';
import type { GpuContext } from './device.js';
import type { ShaderSource } from './wgsl-kernels.js';

/**
 * An ORT runtime on WebGPU, as the engine sees it: sessions run on `gpu.device`, the device our own
 * kernels (read through `shaders`) use too. Built by src/backends/ort-webgpu.ts.
 */
export interface GpuRuntime extends EngineRuntime {
  readonly name: 'webgpu';
  readonly gpu: GpuContext;
  readonly shaders: ShaderSource;
}

export function isGpuRuntime(runtime: EngineRuntime): runtime is GpuRuntime {
  return runtime.name === 'webgpu' && 'gpu' in runtime && 'shaders' in runtime;
}

import type { BlockPool } from '../kv/block-pool.js';
import type { ModelConfig } from '../model/config.js';
import { ModelRunner, type RunnerOptions } from '../model/runner.js';
import type { OrtRuntime } from '../model/runtime.js';
import { isGpuRuntime } from './gpu-runtime.js';
import { GpuModelRunner } from './gpu-runner.js';
import { GpuKernels } from './kernels.js';

/** What the engine needs of a runner; ModelRunner and GpuModelRunner both are one. */
export interface PassRunner {
  readonly config: ModelConfig;
  forward: ModelRunner['forward'];
  release(): Promise<void>;
}

/**
 * The runner for `runtime`: on WebGPU the one that keeps the KV cache on the device (our kernels compiled
 * on the runtime's device), elsewhere ModelRunner. For the engine (wiring left to engine.ts's owner):
 *   const runner = await createRunner(runtime, files.onnx, files.config, options);   // in Engine.load
 *   attachKvPool(runner, pool);                                                      // after the BlockPool exists
 */
export async function createRunner(runtime: OrtRuntime, onnx: Uint8Array, config: ModelConfig, options: RunnerOptions & { kvOnDevice?: boolean } = {}): Promise<PassRunner> {
  if (isGpuRuntime(runtime) && options.kvOnDevice !== false) {
    const kernels = await GpuKernels.create(runtime.gpu.device, runtime.shaders);
    return GpuModelRunner.create(runtime, onnx, config, kernels);
  }
  return ModelRunner.create(runtime, onnx, config, options);
}

/** Gives a device-KV runner the pool whose bookkeeping it follows; a no-op for other runners. */
export function attachKvPool(runner: PassRunner, pool: BlockPool): void {
  if (runner instanceof GpuModelRunner) runner.attachPool(pool);
}

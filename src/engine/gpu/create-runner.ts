import type { BlockPool } from '../kv/block-pool.js';
import type { ModelConfig } from '../model/config.js';
import { ModelRunner, type RunnerOptions } from '../model/runner.js';
import type { OrtRuntime } from '../model/runtime.js';
import { isGpuRuntime } from './gpu-runtime.js';
import { GpuModelRunner, UnsupportedOnDevice } from './gpu-runner.js';
import { checkMemoryBudget } from '../model/session-loader.js';
import { GpuKernels } from './kernels.js';

/** What the engine needs of a runner; ModelRunner and GpuModelRunner both are one. */
export interface PassRunner {
  readonly config: ModelConfig;
  forward: ModelRunner['forward'];
  release(): Promise<void>;
}

/**
 * The runner for `runtime`: on WebGPU the one that keeps the KV cache on the device (our kernels compiled
 * on the runtime's device) when the graph allows it (float32 KV, position_ids), elsewhere ModelRunner.
 * The engine attaches its block pool with attachKvPool() once the pool exists.
 */
export async function createRunner(
  runtime: OrtRuntime,
  onnx: Uint8Array,
  config: ModelConfig,
  options: RunnerOptions & { kvOnDevice?: boolean; sampleOnDevice?: boolean } = {},
): Promise<PassRunner> {
  if (isGpuRuntime(runtime) && options.kvOnDevice !== false) {
    checkMemoryBudget(onnx.byteLength, config, options.kvCacheBytes ?? 64 * 2 ** 20, options.memoryBudgetBytes);
    const kernels = await GpuKernels.create(runtime.gpu.device, runtime.shaders);
    try {
      return await GpuModelRunner.create(runtime, onnx, config, kernels, { logitsOnDevice: options.sampleOnDevice !== false });
    } catch (err) {
      if (!(err instanceof UnsupportedOnDevice)) throw err;
    }
  }
  return ModelRunner.create(runtime, onnx, config, options);
}

/** Gives a device-KV runner the pool whose bookkeeping it follows; a no-op for other runners. */
export function attachKvPool(runner: PassRunner, pool: BlockPool): void {
  if (runner instanceof GpuModelRunner) runner.attachPool(pool);
}

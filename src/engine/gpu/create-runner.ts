import type { BlockPool } from '../kv/block-pool.js';
import type { ModelConfig } from '../model/config.js';
import { ModelRunner, type RunnerOptions } from '../model/runner.js';
import type { OrtRuntime, RunnerChoice } from '../model/runtime.js';
import { streamOnnx, type ModelDtype, type ModelSource } from '../model/model-files.js';
import { isGpuRuntime } from './gpu-runtime.js';
import { GpuModelRunner, UnsupportedOnDevice } from './gpu-runner.js';
import { checkMemoryBudget } from '../model/session-loader.js';
import { GpuKernels } from './kernels.js';
import { InvalidRequestError } from '../errors.js';
import { KernelRunner, type KvDtype, type KvStorage } from '../kernels/kernel-runner.js';
import { UnsupportedByKernels } from '../kernels/llama-weights.js';
import type { KvShape } from '../kv/sequence-kv.js';

/** What the engine needs of a runner; ModelRunner, GpuModelRunner and KernelRunner all are one. */
export interface PassRunner {
  readonly config: ModelConfig;
  forward: ModelRunner['forward'];
  release(): Promise<void>;
}

/** Which implementation runs the passes: our WebAssembly kernels, or onnxruntime (on `runtime.name`). */
export function runnerName(runner: PassRunner): 'kernels' | 'onnxruntime' {
  return runner instanceof KernelRunner ? 'kernels' : 'onnxruntime';
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
  const kernels = await kernelRunner(runtime, onnx, config, options);
  if (kernels) return kernels;
  if (isGpuRuntime(runtime) && options.kvOnDevice !== false) {
    checkMemoryBudget(
      [{ label: 'weights', bytes: onnx.byteLength }],
      config,
      options.kvCacheBytes ?? 64 * 2 ** 20,
      options.memoryBudgetBytes,
    );
    const kernels = await GpuKernels.create(runtime.gpu.device, runtime.shaders);
    try {
      return await GpuModelRunner.create(runtime, onnx, config, kernels, {
        logitsOnDevice: options.sampleOnDevice !== false,
      });
    } catch (err) {
      if (!(err instanceof UnsupportedOnDevice)) throw err;
    }
  }
  return ModelRunner.create(runtime, onnx, config, options);
}

/**
 * Our kernels for a `wasm` runtime that carries them, the weights streamed from `source` straight into
 * their linear memory (the file is never held whole). Undefined when they do not apply: another runtime,
 * `runner: 'onnxruntime'`, or a graph they do not cover (warned about; refused under `runner: 'kernels'`),
 * and then the caller reads the file whole for onnxruntime.
 */
export async function streamedKernelRunner(
  runtime: OrtRuntime,
  source: ModelSource,
  dtype: ModelDtype,
  config: ModelConfig,
  options: RunnerOptions,
): Promise<KernelRunner | undefined> {
  const choice = runtime.runner ?? 'auto';
  if (choice === 'onnxruntime' || isGpuRuntime(runtime) || !runtime.kernels) return undefined;
  try {
    return await KernelRunner.fromStream(runtime.kernels, await streamOnnx(source, dtype), config, options);
  } catch (err) {
    return refuseOrFallBack(err, choice, runtime);
  }
}

function refuseOrFallBack(err: unknown, choice: RunnerChoice, runtime: OrtRuntime): undefined {
  if (!(err instanceof UnsupportedByKernels)) throw err;
  if (choice === 'kernels')
    throw new InvalidRequestError(
      'model',
      `the edge kernels cannot run this model: ${err.message}`,
      'unsupported_model',
    );
  console.warn(`edge kernels: ${err.message}; running the graph on onnxruntime (${runtime.name}) instead`);
  return undefined;
}

/**
 * Our kernels for a `wasm` runtime that carries them, unless told not to. A graph they do not cover goes
 * to onnxruntime with a warning saying which graph and why; asked for by name (`runner: 'kernels'`),
 * that is a refusal instead.
 */
async function kernelRunner(
  runtime: OrtRuntime,
  onnx: Uint8Array,
  config: ModelConfig,
  options: RunnerOptions,
): Promise<KernelRunner | undefined> {
  const choice = runtime.runner ?? 'auto';
  if (choice === 'onnxruntime' || isGpuRuntime(runtime)) return undefined;
  if (!runtime.kernels) {
    if (choice === 'kernels')
      throw new InvalidRequestError(
        'model',
        `the ${runtime.name} runtime has no edge kernels module`,
        'unsupported_model',
      );
    return undefined;
  }
  try {
    return await KernelRunner.create(runtime.kernels, onnx, config, options);
  } catch (err) {
    return refuseOrFallBack(err, choice, runtime);
  }
}

/**
 * The KV pool's storage in the runner's own memory (the kernels' linear memory), or undefined: JS arrays.
 * A float16 pool exists on the kernels only; other runners refuse it.
 */
export function kvStorageFor(
  runner: PassRunner,
  shape: KvShape,
  numBlocks: number,
  blockSize: number,
  dtype: KvDtype = 'fp32',
): KvStorage | undefined {
  if (runner instanceof KernelRunner) return runner.allocateKv(shape, numBlocks, blockSize, dtype);
  if (dtype !== 'fp32')
    throw new InvalidRequestError(
      'KV_DTYPE',
      `a ${dtype} KV cache needs the edge kernels (backend wasm or kernels); ${runnerName(runner)} keeps float32`,
      'unsupported_model',
    );
  return undefined;
}

/** Gives a device-KV runner the pool whose bookkeeping it follows; a no-op for other runners. */
export function attachKvPool(runner: PassRunner, pool: BlockPool): void {
  if (runner instanceof GpuModelRunner) runner.attachPool(pool);
}

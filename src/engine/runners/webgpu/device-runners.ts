import { InvalidRequestError } from '../../errors.js';
import type { ModelRunner } from '../model-runner.js';
import type { DeviceRunners } from './gpu-runtime.js';
import { GpuRunner, UnsupportedOnDevice } from './gpu-runner.js';
import { WgslModel } from './pass/wgsl-model.js';
import { WgslRunner } from './pass/wgsl-runner.js';
import { WgslKernels } from './wgsl-kernels.js';

/**
 * A model on our own WGSL pass (./pass/): the kernels' loader reads the file (GGUF, or an ONNX graph they
 * cover), the weights go to the device in their stored form, and each engine gets a runner with its own KV pool.
 */
const loadWgslRunner: DeviceRunners['wgsl'] = async (runtime, kernels, stream, config, options, budget, gguf) => {
  if (options.pipeline)
    throw new InvalidRequestError('model', 'the WGSL pass runs whole models, not pipeline stages', 'unsupported_model');
  const sampling =
    options.sampleOnDevice === false
      ? undefined
      : await WgslKernels.create(runtime.gpu.device, runtime.shaders, ['greedy', 'sample']);
  const model = await WgslModel.fromStream(runtime.gpu.device, kernels, stream, config, {
    limits: options,
    budget,
    format: gguf ? 'gguf' : 'onnx',
    sampling,
  });
  return {
    runner: new WgslRunner(model, options),
    weightBytes: model.weights.bytes,
    another: async (limits) => new WgslRunner(model, limits),
    shared: () => [{ label: 'weights (on the device)', bytes: model.weights.bytes }],
    perRunner: [],
  };
};

/** An ONNX graph on onnxruntime's WebGPU provider with the KV pool on the device; undefined where the graph does not allow it. */
const loadOnnxOnDevice: DeviceRunners['onnx'] = async (runtime, onnx, config, options, budget) => {
  budget.check([{ label: 'weights', bytes: onnx.byteLength }]);
  const kernels = await WgslKernels.create(runtime.gpu.device, runtime.shaders);
  try {
    const create = (): Promise<ModelRunner> =>
      GpuRunner.create(runtime, onnx, config, kernels, { logitsOnDevice: options.sampleOnDevice !== false });
    return {
      runner: await create(),
      weightBytes: onnx.byteLength,
      another: create,
      shared: () => [{ label: 'weights', bytes: onnx.byteLength }],
      perRunner: [],
    };
  } catch (err) {
    if (!(err instanceof UnsupportedOnDevice)) throw err;
    return undefined;
  }
};

/**
 * The runners that keep a model on a WebGPU device, handed to the engine by the GPU runtime
 * (src/backends/ort-webgpu.ts) rather than imported by create-runner.ts: a Workers bundle has no GPU, and
 * every byte of code it carries is held in the isolate's heap.
 */
export const deviceRunners: DeviceRunners = { wgsl: loadWgslRunner, onnx: loadOnnxOnDevice };

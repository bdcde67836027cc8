import { adapterPart } from '../adapters/adapter-cache.js';
import { InvalidRequestError } from '../errors.js';
import { resolveEngineLimits, type EngineLimits } from '../defaults.js';
import { isGpuRuntime } from './webgpu/gpu-runtime.js';
import { KernelModel } from './wasm/kernel-model.js';
import { KernelRunner } from './wasm/kernel-runner.js';
import { KernelStageRunner } from './wasm/kernel-stage-runner.js';
import { UnsupportedByKernels } from '../formats/unsupported.js';
import type { ModelConfig } from '../model/config.js';
import { readOnnx, streamWeights, type ModelDtype, type ModelSource } from '../model/model-files.js';
import type { EngineRuntime } from '../model/runtime.js';
import { OnnxRunner } from './ort/onnx-runner.js';
import { isolateFootprint, MemoryBudget, onnxruntimeFootprint } from './memory-budget.js';
import type { ModelRunner } from './model-runner.js';
import { kvPoolBlocks } from '../model/config.js';
import { endsBytes, HEAD_SPAN, layerCosts, planStages, splitVocabulary } from './stages/stage-plan.js';
import type { StageLink } from './stages/stage-protocol.js';
import { StagedRunner } from './stages/staged-runner.js';
import { RemoteRunner } from './remote/remote-runner.js';
import type { GpuHostOptions, LoadedRunner, RunnerOptions } from './runner-options.js';

/** Variants whose every product is 8-bit: run on `runtime.kernels8Bit` where the runtime has one. */
const EIGHT_BIT_DTYPES: ReadonlySet<ModelDtype> = new Set(['int8', 'uint8', 'quantized']);

/**
 * The one place that chooses and builds a runner, and checks it against the memory budget:
 * - our kernels on a `wasm` runtime that carries them (unless `runner: 'onnxruntime'`), the weights
 *   streamed straight into their linear memory; a graph they do not cover falls back to onnxruntime with
 *   a warning naming what is missing, or is refused when the kernels were asked for by name or the build
 *   has no onnxruntime (kernels-only);
 * - on WebGPU, the runner that keeps the KV pool on the device where the graph allows it;
 * - else onnxruntime (node or web) on the whole file.
 */
export async function loadRunner(
  runtime: EngineRuntime,
  source: ModelSource,
  dtype: ModelDtype,
  /** The weights file in the folder: an ONNX graph, or a GGUF file (dtype `gguf`), which only the kernels read. */
  file: string,
  config: ModelConfig,
  options: RunnerOptions,
): Promise<LoadedRunner> {
  if (options.gpuHost) return remoteRunner(config, dtype, options.gpuHost, options);
  // On wasm the budget stands for a Workers isolate, which also holds the tokenizer, streams and grammars.
  const shared = options.isolateBudget?.(config);
  const besides = [
    ...(shared?.besides ?? (runtime.name === 'wasm' ? [isolateFootprint(config.vocabSize, options.maxBatchSize)] : [])),
    ...adapterPart(options.adapterCacheBytes),
  ];
  const budget = new MemoryBudget(config, shared?.kvBytes ?? options.kvCacheBytes, options.memoryBudgetBytes, besides);
  const choice = runtime.runner ?? 'auto';
  const gpu = isGpuRuntime(runtime);
  // On WebGPU our own kernels are the WGSL pass: GGUF files always, ONNX graphs when the kernels are asked for.
  if (gpu && runtime.kernels && (dtype === 'gguf' || choice === 'kernels') && choice !== 'onnxruntime') {
    const stream = await streamWeights(source, file);
    try {
      return await runtime.devices.wgsl(runtime, runtime.kernels, stream, config, options, budget, dtype === 'gguf');
    } catch (err) {
      if (!(err instanceof UnsupportedByKernels)) throw err;
      throw new InvalidRequestError(
        'model',
        `the WGSL pass cannot run this model: ${err.message}`,
        'unsupported_model',
      );
    }
  }
  if (dtype === 'gguf' && (choice === 'onnxruntime' || gpu || !runtime.kernels))
    throw new InvalidRequestError(
      'model',
      `GGUF weights run on the edge kernels or the WGSL pass only (backend wasm, kernels or webgpu), not on the ${runtime.name} runtime${choice === 'onnxruntime' ? ' forced to onnxruntime' : ''}`,
      'unsupported_model',
    );
  if (choice === 'kernels' && (gpu || !runtime.kernels))
    throw new InvalidRequestError(
      'model',
      `the ${runtime.name} runtime has no edge kernels module; use backend wasm or kernels`,
      'unsupported_model',
    );
  if (choice !== 'onnxruntime' && !gpu && runtime.kernels) {
    try {
      const module = (EIGHT_BIT_DTYPES.has(dtype) && runtime.kernels8Bit) || runtime.kernels;
      const { pipeline } = options;
      const stream = await streamWeights(source, file);
      const headBudget = new MemoryBudget(config, 0, options.memoryBudgetBytes, besides);
      const vocabOnStages =
        pipeline !== undefined &&
        (pipeline.vocab === 'stages' ||
          (pipeline.vocab !== 'head' && !headBudget.fits(endsBytes(config, stream.size))));
      // A head without the vocabulary holds no weights: the file is not read here at all.
      const model = vocabOnStages
        ? undefined
        : await KernelModel.fromStream(module, stream, config, {
            limits: options,
            budget: pipeline ? headBudget : budget,
            format: dtype === 'gguf' ? 'gguf' : 'onnx',
            span: pipeline ? HEAD_SPAN : undefined,
          });
      if (pipeline) {
        const layers = planStages(pipeline.stages, layerCosts(config, stream.size, options.kvCacheBytes));
        const spans = vocabOnStages ? splitVocabulary(layers, config.vocabSize) : layers;
        const staged = (limits: EngineLimits, links: StageLink[]): Promise<ModelRunner> =>
          StagedRunner.open(
            config,
            model && KernelStageRunner.over(model, limits),
            links,
            spans,
            {
              model: pipeline.model,
              dtype,
              numBlocks: kvPoolBlocks(config, limits.kvCacheBytes, limits.blockSize, pipeline.kvDtype),
              kvDtype: pipeline.kvDtype,
              // Only the limits: the options hold what a message cannot carry (the links themselves).
              limits: resolveEngineLimits(limits),
              adapterCacheBytes: options.adapterCacheBytes,
            },
            { microBatches: pipeline.microBatches, inFlight: pipeline.inFlight, stageWaitMs: pipeline.stageWaitMs },
          );
        return {
          runner: await staged(options, pipeline.links),
          weightBytes: model?.weights.bytes ?? 0,
          another: (limits, links) => {
            if (!links) throw new Error('an engine over pipeline stages needs links of its own');
            return staged(limits, links);
          },
          shared: () =>
            model
              ? [
                  { label: 'embedding and output projection', bytes: model.weights.bytes },
                  { label: 'scratch', bytes: model.scratchBytes },
                ]
              : [],
          perRunner: [],
        };
      }
      if (!model) throw new Error('unreachable: only a pipeline leaves the vocabulary to its stages');
      return {
        runner: KernelRunner.over(model, options),
        weightBytes: model.weights.bytes,
        another: async (limits) => KernelRunner.over(model, limits),
        shared: () => [
          { label: 'weights', bytes: model.weights.bytes },
          { label: 'scratch', bytes: model.scratchBytes },
        ],
        perRunner: [],
      };
    } catch (err) {
      if (!(err instanceof UnsupportedByKernels)) throw err;
      if (choice === 'kernels' || runtime.hasOnnxruntime === false || dtype === 'gguf') {
        const why = choice === 'kernels' ? '' : ' (this build has no onnxruntime-web to fall back on)';
        throw new InvalidRequestError(
          'model',
          `the edge kernels cannot run this model: ${err.message}${why}`,
          'unsupported_model',
        );
      }
      console.warn(`edge kernels: ${err.message}; running the graph on onnxruntime (${runtime.name}) instead`);
    }
  }
  if (config.slidingWindow)
    throw new InvalidRequestError(
      'model',
      `${config.modelType}'s sliding-window layers run on the edge kernels only (from a GGUF file), not on onnxruntime`,
      'unsupported_model',
    );
  const onnx = await readOnnx(source, dtype);
  if (gpu && options.kvOnDevice !== false) {
    const onDevice = await runtime.devices.onnx(runtime, onnx, config, options, budget);
    if (onDevice) return onDevice;
  }
  const [weights, ...session] = onnxruntimeFootprint(runtime.name, onnx.byteLength, dtype === 'fp16');
  budget.check([weights, ...session]);
  const create = (): Promise<ModelRunner> =>
    OnnxRunner.create(runtime, onnx, config, { intraOpNumThreads: options.intraOpNumThreads });
  // Each engine gets a session of its own (onnxruntime's own copies of the weights), counted per engine.
  return {
    runner: await create(),
    weightBytes: onnx.byteLength,
    another: create,
    shared: () => [weights],
    perRunner: session,
  };
}

/** A runner per engine on the GPU host, each a session with a KV pool of its own; nothing of the weights here. */
async function remoteRunner(
  config: ModelConfig,
  dtype: ModelDtype,
  host: GpuHostOptions,
  options: EngineLimits,
): Promise<LoadedRunner> {
  const connect = (limits: EngineLimits): Promise<RemoteRunner> =>
    RemoteRunner.connect(config, host.link, {
      model: host.model,
      dtype,
      numBlocks: kvPoolBlocks(config, limits.kvCacheBytes, limits.blockSize, host.kvDtype),
      blockSize: limits.blockSize,
      kvDtype: host.kvDtype,
      limits: resolveEngineLimits(limits),
    });
  const runner = await connect(options);
  return {
    runner,
    weightBytes: 0,
    digest: runner.opened?.digest,
    another: connect,
    shared: () => [],
    perRunner: [],
  };
}

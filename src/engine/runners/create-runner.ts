import { InvalidRequestError } from '../errors.js';
import { resolveEngineLimits, type EngineLimits } from '../defaults.js';
import { isGpuRuntime } from './webgpu/gpu-runtime.js';
import { GpuRunner, UnsupportedOnDevice } from './webgpu/gpu-runner.js';
import { WgslKernels } from './webgpu/wgsl-kernels.js';
import { WgslModel } from './webgpu/pass/wgsl-model.js';
import { WgslRunner } from './webgpu/pass/wgsl-runner.js';
import type { GpuRuntime } from './webgpu/gpu-runtime.js';
import type { ByteStream } from '../model/model-files.js';
import { KernelModel } from './wasm/kernel-model.js';
import { KernelRunner } from './wasm/kernel-runner.js';
import { KernelStageRunner } from './wasm/kernel-stage-runner.js';
import { UnsupportedByKernels } from '../formats/unsupported.js';
import type { ModelConfig } from '../model/config.js';
import { readOnnx, streamWeights, type ModelDtype, type ModelSource } from '../model/model-files.js';
import type { EngineRuntime } from '../model/runtime.js';
import { OnnxRunner } from './ort/onnx-runner.js';
import { isolateFootprint, MemoryBudget, onnxruntimeFootprint, type FootprintPart } from './memory-budget.js';
import type { ModelRunner } from './model-runner.js';
import type { KvDtype } from '../kv/block-pool.js';
import { kvPoolBlocks } from '../model/config.js';
import { endsBytes, HEAD_SPAN, layerCosts, planStages, splitVocabulary } from './stages/stage-plan.js';
import type { StageLink } from './stages/stage-protocol.js';
import { StagedRunner } from './stages/staged-runner.js';
import type { HostLink } from './remote/host-link.js';
import { RemoteRunner } from './remote/remote-runner.js';

/** A model whose layers run on pipeline stages (each a Worker of its own); the head holds the ends. */
export interface PipelineOptions {
  /** Stages the layers are split over (PIPELINE_STAGES). */
  stages: number;
  /** The model's name as every stage Worker serves it (their MODEL). */
  model: string;
  /** This engine's links to its stages, in layer order: another engine of the isolate has its own. */
  links: StageLink[];
  kvDtype: KvDtype;
  /** Micro-batches a pass is split into (GPipe's; default 1: each pass whole). */
  microBatches?: number;
  /** Passes the head keeps in flight, each on another stage at a time (default: one per stage; 1: one at a time). */
  inFlight?: number;
  /**
   * Where the embedding and output projection live (PIPELINE_VOCAB): on the head, split by rows over the
   * stages, or (`auto`, the default) on the stages only when the head's budget cannot hold them.
   */
  vocab?: 'head' | 'stages' | 'auto';
}

/** A GPU host runs the model (GPU_HOST_URL): here only the pool's bookkeeping, no weights. */
export interface GpuHostOptions {
  link: HostLink;
  /** The model's name as the host serves it (MODEL). */
  model: string;
  kvDtype: KvDtype;
}

/** Variants whose every product is 8-bit: run on `runtime.kernels8Bit` where the runtime has one. */
const EIGHT_BIT_DTYPES: ReadonlySet<ModelDtype> = new Set(['int8', 'uint8', 'quantized']);

/** What sizes a runner (the engine's limits) and how onnxruntime runs. */
export interface RunnerOptions extends EngineLimits {
  /** Threads for one op (onnxruntime-node's native CPU backend only). */
  intraOpNumThreads?: number;
  /** On WebGPU: keep the KV pool on the device (default), or use the plain onnxruntime runner. */
  kvOnDevice?: boolean;
  /** On WebGPU: draw tokens where the logits are (default true). */
  sampleOnDevice?: boolean;
  /**
   * Where engines share an isolate (isolate-models.ts): what the budget counts besides the runner's own
   * parts, and the KV pools it must leave room for, in place of one engine's isolate part and kvCacheBytes.
   */
  isolateBudget?: (config: ModelConfig) => { besides: FootprintPart[]; kvBytes: number };
  /** The layers on pipeline stages: the kernels hold only the ends here, and the KV pool is the stages'. */
  pipeline?: PipelineOptions;
  /** The whole model on a GPU host: its weights and KV bytes there, none here. */
  gpuHost?: GpuHostOptions;
}

/**
 * A loaded runner, the bytes of the weights file it read (for a draft model's budget), and how further
 * engines of the same isolate get a runner over the same weights.
 */
export interface LoadedRunner {
  runner: ModelRunner;
  weightBytes: number;
  /**
   * Another runner over these weights, for another engine: its own KV pool, the weights not loaded again;
   * over pipeline stages, its own stages (`links`).
   */
  another(limits: EngineLimits, links?: StageLink[]): Promise<ModelRunner>;
  /** Bytes held once however many runners there are (the weights; the kernels' shared scratch, as it is now). */
  shared(): FootprintPart[];
  /** Bytes each runner holds besides its KV pool (an onnxruntime session of its own). */
  perRunner: FootprintPart[];
  /** The weights file's digest where another process read it (a GPU host): the file is not read here. */
  digest?: string;
}

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
  const besides =
    shared?.besides ?? (runtime.name === 'wasm' ? [isolateFootprint(config.vocabSize, options.maxBatchSize)] : []);
  const budget = new MemoryBudget(config, shared?.kvBytes ?? options.kvCacheBytes, options.memoryBudgetBytes, besides);
  const choice = runtime.runner ?? 'auto';
  const gpu = isGpuRuntime(runtime);
  // On WebGPU our own kernels are the WGSL pass: GGUF files always, ONNX graphs when the kernels are asked for.
  if (gpu && runtime.kernels && (dtype === 'gguf' || choice === 'kernels') && choice !== 'onnxruntime') {
    const stream = await streamWeights(source, file);
    try {
      return await loadWgslRunner(runtime, runtime.kernels, stream, config, options, budget, dtype === 'gguf');
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
            },
            { microBatches: pipeline.microBatches, inFlight: pipeline.inFlight },
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
                  { label: 'scratch', bytes: model.arena.bytes },
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
          { label: 'scratch', bytes: model.arena.bytes },
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
    }
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

/**
 * A model on our own WGSL pass (src/engine/runners/webgpu/pass/): the kernels' loader reads the file (GGUF, or an
 * ONNX graph they cover), the weights go to the device in their stored form, and each engine gets a runner with
 * its own KV pool.
 */
async function loadWgslRunner(
  runtime: GpuRuntime,
  kernels: WebAssembly.Module,
  stream: ByteStream,
  config: ModelConfig,
  options: RunnerOptions,
  budget: MemoryBudget,
  gguf: boolean,
): Promise<LoadedRunner> {
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
}

import type { EngineLimits } from '../defaults.js';
import type { KvDtype } from '../kv/block-pool.js';
import type { ModelConfig } from '../model/config.js';
import type { FootprintPart } from './memory-budget.js';
import type { ModelRunner } from './model-runner.js';
import type { HostLink } from './remote/host-link.js';
import type { StageLink } from './stages/stage-protocol.js';

// What loading a runner is asked for and gives back: create-runner.ts chooses and builds; the device's own
// loaders (webgpu/device-runners.ts, carried by a GPU runtime) answer in the same terms.

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
  /** How long a stage that stops answering is waited for before its requests fail (PIPELINE_STAGE_WAIT_MS; default 30 s). */
  stageWaitMs?: number;
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
  /** Bytes kept for LoRA adapters, which every budget check counts (EngineOptions.adapterCacheBytes). */
  adapterCacheBytes?: number;
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

import { AdapterCache, adapterPart, heldAdapters, type AdapterCacheStats } from '../../adapters/adapter-cache.js';
import { InvalidRequestError } from '../../errors.js';
import { KernelModel } from '../wasm/kernel-model.js';
import { KernelStageRunner } from '../wasm/kernel-stage-runner.js';
import { kvBytesPerToken, parseModelConfig } from '../../model/config.js';
import { chooseWeights } from '../../model/default-weights.js';
import { streamWeights, type ModelSource } from '../../model/model-files.js';
import type { EngineRuntime } from '../../model/runtime.js';
import type { ArrayKvMemory } from '../array-kv-memory.js';
import type { IsolateModels } from '../isolate-models.js';
import { MemoryBudget, mib, stageIsolateFootprint, type FootprintPart } from '../memory-budget.js';
import type {
  StageCommands,
  StageEnds,
  StageEndsReply,
  StageInfo,
  StageOpen,
  StageAdapterRead,
  StageRead,
  StageReadReply,
  StageReply,
  StageStep,
} from './stage-protocol.js';

/** How a stage's adapter refusals name both sides. */
const ADAPTER_PARTS = { here: 'the stage', sender: 'the head', deploy: 'the stages and the head' };

/** A stage's layers of a model, loaded once per isolate and shared by its stage objects (one per head shard). */
export interface StageModel {
  kernels: KernelModel;
  /** Its layers' part of the LoRA adapters rows name, read from the stage's own folder (none without a share). */
  adapters: AdapterCache | undefined;
  shared(): FootprintPart[];
}

/** Where a stage finds its model and what it may use: the stage Worker's own bindings and budget. */
export interface StageHost {
  runtime: EngineRuntime;
  source: ModelSource;
  /** The model this stage Worker is configured to serve (its MODEL): a head asking for another is refused. */
  model: string;
  memoryBudgetBytes: number | undefined;
  /** The isolate's registry, and this object's name in it. */
  isolate: { models: IsolateModels<StageModel>; holder: string };
}

/** Bytes of a stage's KV pool: every block of the head's pool, for the stage's layers only. */
export function stageKvBytes(
  open: StageOpen,
  config: { numLayers: number; numKvHeads: number; headDim: number },
): number {
  const perToken = kvBytesPerToken(config, open.kvDtype);
  return (open.numBlocks * open.limits.blockSize * perToken * (open.span.to - open.span.from)) / config.numLayers;
}

/**
 * One pipeline stage: a range of layers' weights (shared in the isolate) and their KV pool (its own), serving
 * the head's passes. Every load is a new epoch; a head whose step names another epoch (the stage restarted and
 * lost its pool) is told so, and nothing is computed.
 */
export class StageServer {
  private state:
    | {
        epoch: string;
        runner: KernelStageRunner;
        memory: ArrayKvMemory;
        info: StageInfo;
        adapters: AdapterCache | undefined;
      }
    | undefined;
  /** The last step queued: steps run in the order they came, a step waiting on an adapter's read included. */
  private lastStep: Promise<unknown> = Promise.resolve();

  constructor(private readonly host: StageHost) {}

  get epoch(): string | undefined {
    return this.state?.epoch;
  }

  get info(): StageInfo | undefined {
    return this.state?.info;
  }

  /** Its adapters' cache (its layers' part of each), where the head gave the stage a share for them. */
  get adapters(): AdapterCacheStats | undefined {
    return this.state?.adapters?.stats();
  }

  async open(open: StageOpen): Promise<StageInfo> {
    const { host } = this;
    if (open.model !== host.model)
      throw new InvalidRequestError(
        'PIPELINE_STAGES',
        `the head serves ${JSON.stringify(open.model)} but this stage Worker serves ${JSON.stringify(host.model)}: deploy the stages with the head's MODEL`,
        'model_not_found',
      );
    this.close();
    const raw = await host.source.read('config.json');
    if (!raw)
      throw new InvalidRequestError('model', `the stage finds no config.json for ${open.model}`, 'model_not_found');
    const rawConfig = JSON.parse(new TextDecoder().decode(raw)) as Record<string, unknown>;
    const config = parseModelConfig(rawConfig, {});
    const kvBytes = stageKvBytes(open, config);
    const key = `${open.model}:${open.dtype}:${open.fileBytes ?? '?'}:${open.span.from}-${open.span.to}:${host.runtime.name}`;
    const { models, holder } = host.isolate;
    const model = await models.model(key, async () => {
      const { dtype, file } = await chooseWeights(host.source, rawConfig, open.dtype, 'MODEL_DTYPE');
      const module = host.runtime.kernels;
      if (!module)
        throw new InvalidRequestError(
          'model',
          'a stage runs on the edge kernels; this build has none',
          'unsupported_model',
        );
      const others = models.counted(holder);
      const adapterBytes = open.adapterCacheBytes ?? 0;
      const besides = [
        stageIsolateFootprint(),
        ...adapterPart(adapterBytes),
        ...(others.length
          ? [{ label: 'held by the isolate already', bytes: others.reduce((n, p) => n + p.bytes, 0) }]
          : []),
      ];
      const budget = new MemoryBudget(config, kvBytes, host.memoryBudgetBytes, besides);
      const stream = await streamWeights(host.source, file);
      if (open.fileBytes !== undefined && stream.size !== undefined && stream.size !== open.fileBytes)
        throw new InvalidRequestError(
          'PIPELINE_STAGES',
          `the head's ${file} is ${open.fileBytes} bytes but this stage's is ${stream.size}: deploy the stages and the head with the same model files`,
          'model_not_found',
        );
      const kernels = await KernelModel.fromStream(module, stream, config, {
        limits: open.limits,
        budget,
        format: dtype === 'gguf' ? 'gguf' : 'onnx',
        span: open.span,
      });
      return {
        kernels,
        adapters: adapterBytes > 0 ? new AdapterCache(host.source, config, adapterBytes, open.span) : undefined,
        shared: () => [
          stageIsolateFootprint(),
          { label: `layers ${open.span.from}..${open.span.to - 1}`, bytes: kernels.weights.bytes },
          { label: 'scratch', bytes: kernels.scratchBytes },
          ...adapterPart(adapterBytes),
        ],
      };
    });
    // The layers may have been loaded by another stage object of this isolate: its pool must fit beside them.
    const held = models.counted(holder);
    const heldBytes = held.reduce((n, p) => n + p.bytes, 0);
    const budget = host.memoryBudgetBytes;
    if (budget !== undefined && heldBytes + kvBytes > budget)
      throw new InvalidRequestError(
        'model',
        `the stage's isolate has no room for another KV pool: it holds ${mib(heldBytes)} (${held.map((p) => `${p.label} ${mib(p.bytes)}`).join(' + ')}) and a pool of ${mib(kvBytes)} would pass the budget of ${mib(budget)}; more stages (PIPELINE_STAGES), a smaller KV_CACHE_MB or fewer shards would fit`,
        'model_too_large',
      );
    const runner = KernelStageRunner.over(model.kernels, open.limits);
    const memory = runner.createKvMemory(config, open.numBlocks, open.limits.blockSize, open.kvDtype);
    const epoch = crypto.randomUUID();
    models.hold(holder, key, [{ label: 'KV pool', bytes: kvBytes }], () => void runner.release(), this);
    const info: StageInfo = {
      epoch,
      span: open.span,
      weightBytes: model.kernels.weights.bytes,
      kvBytes,
      isolateBytes: models.countedBytes(),
    };
    this.state = { epoch, runner, memory, info, adapters: model.adapters };
    return info;
  }

  /**
   * One pass over the stage's layers, after the steps sent before it. Its rows' adapters are read first where the
   * stage holds them not (the only wait); the pass itself is synchronous: the shared scratch is its until it returns.
   */
  step(step: StageStep): Promise<StageReply> {
    const run = this.lastStep.then(() => this.stepInTurn(step));
    this.lastStep = run.catch(() => undefined);
    return run;
  }

  private async stepInTurn(step: StageStep): Promise<StageReply> {
    const opened = this.current(step.epoch);
    const variants =
      opened &&
      (await heldAdapters(
        opened.adapters,
        step.rows.map((r) => r.adapter),
        ADAPTER_PARTS,
      ));
    // Closed or reopened while an adapter was read: the head's epoch is gone.
    const state = this.current(step.epoch);
    if (!state || !variants) return { lost: true, epoch: this.state?.epoch };
    const t0 = performance.now();
    this.apply(state.memory, step);
    const rows = step.rows.map((row, i) => ({ ...row, variant: variants[i] }));
    const hidden = state.runner.forwardHidden(rows, step.hidden);
    const computeMs = performance.now() - t0;
    return {
      lost: false,
      epoch: state.epoch,
      hidden,
      computeMs,
      isolateBytes: this.host.isolate.models.countedBytes(),
    };
  }

  /** Reads an adapter's part for the head's request (a refusal is the request's), after the steps sent before. */
  adapter(read: StageAdapterRead): Promise<{ lost: boolean }> {
    const run = this.lastStep.then(async () => {
      const opened = this.current(read.epoch);
      if (!opened) return { lost: true };
      await heldAdapters(opened.adapters, [read.adapter], ADAPTER_PARTS);
      return { lost: false };
    });
    this.lastStep = run.catch(() => undefined);
    return run;
  }

  read(read: StageRead): StageReadReply {
    const state = this.current(read.epoch);
    if (!state) return { lost: true, epoch: this.state?.epoch };
    return { lost: false, bytes: state.memory.readBlockNow(read.block) };
  }

  ends(ends: StageEnds): StageEndsReply {
    const state = this.current(ends.epoch);
    if (!state) return { lost: true, epoch: this.state?.epoch };
    const values =
      ends.op === 'embed' ? state.runner.embedRows(ends.ids) : state.runner.vocabLogits(ends.hidden, ends.count);
    return { lost: false, values };
  }

  /**
   * Gives the pool back to the isolate (the weights stay for the other stage objects). With an epoch, only
   * if the stage is still that one: a head's late close must not drop a pool opened since.
   */
  close(epoch?: string): void {
    if (!this.state || (epoch !== undefined && epoch !== this.state.epoch)) return;
    this.host.isolate.models.release(this.host.isolate.holder);
    this.state = undefined;
  }

  private current(epoch: string) {
    return this.state?.epoch === epoch ? this.state : undefined;
  }

  /** The head's block operations, in its order: a restore then a copy of that block must copy the restored bytes. */
  private apply(memory: ArrayKvMemory, { ops }: StageCommands): void {
    for (const op of ops) {
      if (op.op === 'copy') memory.copyBlock(op.from, op.to);
      else memory.writeBlock(op.block, op.bytes);
    }
  }
}

import type { EngineLimits } from '../defaults.js';
import { InvalidRequestError } from '../errors.js';
import type { KvDtype } from '../kv/block-pool.js';
import { kvBytesPerToken, type ModelConfig } from '../model/config.js';
import type { LoadedModel } from '../model-load.js';
import type { EngineRuntime } from '../model/runtime.js';
import type { IsolateModels } from './isolate-models.js';
import { engineIsolateFootprint, mib, sharedIsolateFootprint, type FootprintPart } from './memory-budget.js';

/** An engine's place in an isolate whose engines share their model (a Durable Object among others). */
export interface IsolateShare {
  models: IsolateModels;
  /** Who holds the engine: the object's id (an object whose instance is replaced holds one engine still). */
  holder: string;
  /** Where the model's files come from (e.g. `r2:<name>`): with the options, what makes two loads' bytes the same. */
  source: string;
  /** How many engines the isolate may hold at once (SHARD_COUNT): each engine's pool leaves room for them all. */
  engines: number;
}

/** The smallest KV pool an engine of a shared isolate is given; below it the engine is refused. */
export const POOL_FLOOR_BLOCKS = 4;

/** What makes two engines' weights the same bytes: where they come from, which file, which runner. */
export function sharedModelKey(
  share: IsolateShare,
  runtime: EngineRuntime,
  options: { modelId?: string; dtype?: string; kvStore?: unknown; pipeline?: { stages: number } },
): string {
  return JSON.stringify([
    options.pipeline?.stages ?? 0,
    share.source,
    options.modelId ?? 'default',
    options.dtype ?? '',
    runtime.name,
    runtime.runner ?? 'auto',
    options.kvStore !== undefined,
  ]);
}

const total = (parts: readonly FootprintPart[]): number => parts.reduce((n, p) => n + p.bytes, 0);

/**
 * How an engine of a shared isolate is sized: the model's parts once (weights, shared scratch, the code and
 * the tokenizer), then per engine its own state and a KV pool. The pool is KV_CACHE_MB where that many
 * engines fit in the budget, else an equal share of what is left, so `engines` engines always fit (whichever
 * comes first) and none depends on the order they came in; never below POOL_FLOOR_BLOCKS blocks: an engine
 * that would get less is refused, naming what the isolate holds.
 */
export class IsolatePoolPlan {
  constructor(
    private readonly share: IsolateShare,
    private readonly key: string,
    private readonly limits: EngineLimits,
    private readonly kvDtype: KvDtype,
    /** The runtime's name: in a Workers isolate (wasm) the code and JS heap beside the runners are counted too. */
    runtimeName: string,
    /** The KV pool's bytes are on pipeline stages, not here: an engine here holds its bookkeeping only. */
    private readonly kvElsewhere = false,
  ) {
    this.countsIsolate = runtimeName === 'wasm';
  }

  private readonly countsIsolate: boolean;

  private floor(config: ModelConfig): number {
    return POOL_FLOOR_BLOCKS * this.limits.blockSize * kvBytesPerToken(config, this.kvDtype);
  }

  /** An engine's own JS part grows with the tokenizer's vocabulary (its grammars' tables), not the model's rows. */
  private enginePart(tokenizerVocab: number): FootprintPart[] {
    return this.countsIsolate ? [engineIsolateFootprint(tokenizerVocab, this.limits.maxBatchSize)] : [];
  }

  /** Engines still to come, this one included, that the rest of the budget is kept for. */
  private remaining(): number {
    return Math.max(1, this.share.engines - this.share.models.holders(this.key, this.share.holder));
  }

  /** The budget's terms while the first engine loads the model: what the isolate holds already, and room for every engine at the floor. */
  readonly budget = (config: ModelConfig, vocab: number): { besides: FootprintPart[]; kvBytes: number } => {
    const engines = this.remaining();
    const mine = this.enginePart(vocab).map((p) => ({ label: `${engines} x ${p.label}`, bytes: engines * p.bytes }));
    const shared = this.isolateParts(vocab);
    const held = total(this.share.models.counted(this.share.holder));
    const others = held ? [{ label: 'held by the isolate already', bytes: held }] : [];
    return { besides: [...shared, ...mine, ...others], kvBytes: this.kvElsewhere ? 0 : engines * this.floor(config) };
  };

  /** What a Workers isolate holds once beside the runners (code, tokenizer); nothing elsewhere. */
  isolateParts(tokenizerVocab: number): FootprintPart[] {
    return this.countsIsolate ? [sharedIsolateFootprint(tokenizerVocab)] : [];
  }

  /** The model as the registry counts it: its runner's shared parts and, in a Workers isolate, the code and tokenizer. */
  withIsolatePart(model: LoadedModel): LoadedModel {
    const parts = this.isolateParts(model.tokenizer.vocabSize);
    if (parts.length === 0) return model;
    const runnerParts = model.shared;
    return { ...model, shared: () => [...runnerParts(), ...parts] };
  }

  /** This engine's KV pool bytes and everything it will hold, or a refusal naming what the isolate holds. */
  pool(model: LoadedModel): { kvCacheBytes: number; parts: FootprintPart[] } {
    return this.poolFor(
      model.config,
      model.tokenizer.vocabSize,
      model.perRunner,
      this.share.models.counted(this.share.holder),
    );
  }

  /**
   * pool() for a model described, not loaded: its config, tokenizer vocabulary and per-runner parts, and
   * `counted`, what the isolate holds (the model's shared parts among them), so a plan made before a load
   * (runner-plan.ts) sizes the pool as the load will.
   */
  poolFor(
    config: ModelConfig,
    tokenizerVocab: number,
    perRunner: readonly FootprintPart[],
    counted: readonly FootprintPart[],
  ): { kvCacheBytes: number; parts: FootprintPart[] } {
    const { memoryBudgetBytes: budget, kvCacheBytes: wanted, blockSize } = this.limits;
    const own = [...this.enginePart(tokenizerVocab), ...perRunner];
    if (this.kvElsewhere) return { kvCacheBytes: wanted, parts: own };
    const blockBytes = blockSize * kvBytesPerToken(config, this.kvDtype);
    const remaining = this.remaining();
    const room = budget === undefined ? Infinity : budget - total(counted) - remaining * total(own);
    const share = Math.min(wanted, Math.floor(room / remaining));
    const blocks = Math.floor(share / blockBytes);
    if (blocks < POOL_FLOOR_BLOCKS) {
      const held = counted.map((p) => `${p.label} ${mib(p.bytes)}`).join(' + ');
      throw new InvalidRequestError(
        'model',
        `the isolate has no room for another engine: it holds ${mib(total(counted))} (${held}); ` +
          `one more needs ${mib(total(own))} + a KV pool of at least ${mib(this.floor(config))} (${POOL_FLOOR_BLOCKS} blocks), ` +
          `within the budget of ${mib(budget ?? 0)}; fewer shards (SHARD_COUNT), a smaller or more quantised model, ` +
          'or a larger MEMORY_BUDGET_MB would fit',
        'model_too_large',
      );
    }
    const kvCacheBytes = blocks * blockBytes;
    return { kvCacheBytes, parts: [{ label: 'KV pool', bytes: kvCacheBytes }, ...own] };
  }
}

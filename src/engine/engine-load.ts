import { resolveEngineLimits, type EngineLimits } from './defaults.js';
import type { EngineOptions } from './engine-options.js';
import { InvalidRequestError } from './errors.js';
import { KV_FORMAT_VERSION } from './kv/block-store.js';
import { isKvDtype, KV_DTYPES } from './kv/kv-dtype.js';
import { sha256Hex } from './kv/sha256.js';
import { loadModel, type LoadedModel } from './model-load.js';
import type { ModelSource } from './model/model-files.js';
import type { EngineRuntime } from './model/runtime.js';
import { IsolatePoolPlan, sharedModelKey } from './runners/isolate-pool.js';
import type { ModelRunner } from './runners/model-runner.js';
import { loadDraftModel } from './speculative/load-draft.js';
import { Speculator } from './speculative/speculator.js';

/** Everything an engine is built from: a loaded model, a runner of its own, its limits, draft and cache identity. */
export interface EngineParts {
  model: LoadedModel;
  runner: ModelRunner;
  /** The limits with the KV pool's bytes as the isolate's plan sized them. */
  limits: EngineLimits;
  speculator: Speculator;
  /** Salts every block hash: everything that changes a block's bytes names it. */
  cacheIdentity: string;
  /** Registers the built engine with the isolate's models (held until the object's next instance loads). */
  hold(engine: object): void;
}

/**
 * Loads what an engine needs: the model (once per isolate where engines share one, each engine's KV pool sized
 * so that every engine of the isolate fits the budget), a runner, the draft model. Engine.load builds on it.
 */
export async function loadEngineParts(
  runtime: EngineRuntime,
  source: ModelSource,
  options: EngineOptions,
): Promise<EngineParts> {
  const limits = resolveEngineLimits(options);
  const kvDtype = options.kvDtype ?? 'fp32';
  if (!isKvDtype(kvDtype))
    throw new InvalidRequestError(
      'KV_DTYPE',
      `the KV cache's element type must be ${KV_DTYPES.join(', ')}, got ${JSON.stringify(kvDtype)}`,
      'unsupported_model',
    );
  const loadOptions = { ...options, digest: options.kvStore !== undefined };
  const share = options.isolate;
  if (!share) {
    const model = await loadModel(runtime, source, loadOptions, limits);
    const runner = await model.takeRunner(limits, options.pipeline?.links);
    return { ...(await assemble(runtime, model, runner, limits, options)), hold: () => {} };
  }
  // An object's earlier instance (the runtime replaced it) holds nothing any more.
  share.models.release(share.holder);
  const key = sharedModelKey(share, runtime, options);
  const plan = new IsolatePoolPlan(share, key, limits, kvDtype, runtime.name, options.pipeline !== undefined);
  const model = await share.models.model(key, async () =>
    plan.withIsolatePart(await loadModel(runtime, source, { ...loadOptions, isolateBudget: plan.budget }, limits)),
  );
  const runner = await model.takeRunner(limits, options.pipeline?.links);
  let pool: ReturnType<IsolatePoolPlan['pool']>;
  try {
    pool = plan.pool(model);
  } catch (err) {
    await runner.release();
    throw err;
  }
  const parts = await assemble(runtime, model, runner, { ...limits, kvCacheBytes: pool.kvCacheBytes }, options);
  return {
    ...parts,
    hold: (engine) => share.models.hold(share.holder, key, pool.parts, () => void runner.release(), engine),
  };
}

/** The engine's own parts over a loaded model and its runner: its draft model and its cache identity. */
async function assemble(
  runtime: EngineRuntime,
  model: LoadedModel,
  runner: ModelRunner,
  limits: EngineLimits,
  options: EngineOptions,
): Promise<Omit<EngineParts, 'hold'>> {
  const modelId = options.modelId ?? 'default';
  const draft = options.draft
    ? await loadDraftModel(runtime, options.draft, {
        config: model.config,
        tokenizerModel: model.tokenizerModel,
        samplableVocab: Math.min(model.config.vocabSize, model.tokenizer.vocabSize),
        modelId,
        weightBytes: model.weightBytes,
        limits,
        intraOpNumThreads: options.intraOpNumThreads,
      })
    : undefined;
  // Everything that changes a block's bytes names it, so a stored block is never restored into an engine it does not fit.
  const identity = [
    KV_FORMAT_VERSION,
    modelId,
    model.dtype,
    model.digest,
    JSON.stringify(model.rawConfig),
    options.kvDtype ?? 'fp32',
    limits.blockSize,
    runner.kvIdentity,
    runtime.name,
  ].join('\u0000');
  const cacheIdentity = `${modelId}:${sha256Hex(new TextEncoder().encode(identity))}`;
  return { model, runner, limits, speculator: new Speculator(draft), cacheIdentity };
}

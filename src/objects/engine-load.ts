import { Engine } from '../engine/engine.js';
import type { KvBlockStore } from '../engine/kv/block-store.js';
import type { ModelDtype } from '../engine/model/model-files.js';
import { httpHostLink } from '../engine/runners/remote/host-link.js';
import { isolateModels } from '../engine/runners/isolate-models.js';
import { resolveSpeculativeParams } from '../engine/speculative/speculative-params.js';
import {
  anyJsonWhitespaceVar,
  gpuHostVar,
  inFlightVar,
  adapterCacheVar,
  intVar,
  kvDtypeVar,
  microBatchesVar,
  stageWaitVar,
  modelLocations,
  modelName,
  pipelineStagesVar,
  pipelineVocabVar,
  speculativeVar,
  type Env,
} from '../env.js';
import { LoadTimeoutError, type LoadDeadlines } from '../sources/load-deadline.js';
import { modelSourceFor } from '../sources/model-source.js';
import type { ServiceMetrics } from './service-metrics.js';
import { shardRuntime } from './shard-runtime.js';
import { stageLinks } from './stage-links.js';

/** What loading a shard's engine needs from its object. */
export interface ShardEngineSite {
  env: Env;
  /** The object's id: it names the shard's stage objects and holds its share of the isolate's weights. */
  holder: string;
  /** The shard's durable KV block store, read when the engine is built (its tables are made when first asked for). */
  kvStore: () => KvBlockStore | undefined;
  /** Told how long the load took and where the model came from. */
  metrics: ServiceMetrics;
}

/**
 * The shard's engine, loaded under MODEL_LOAD_TIMEOUT_MS in all and MODEL_STALL_TIMEOUT_MS per chunk read: past
 * either, its reads are stopped and it fails, so a stalled source never holds the shard (the next request loads again).
 */
export function loadShardEngine(site: ShardEngineSite): Promise<Engine> {
  const totalMs = intVar(site.env, 'MODEL_LOAD_TIMEOUT_MS');
  const stop = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new LoadTimeoutError(`loading took longer than ${totalMs} ms (MODEL_LOAD_TIMEOUT_MS)`);
      stop.abort(err);
      reject(err);
    }, totalMs);
  });
  const load = loadEngine(site, { stallMs: intVar(site.env, 'MODEL_STALL_TIMEOUT_MS'), signal: stop.signal });
  return Promise.race([load, deadline]).finally(() => clearTimeout(timer));
}

async function loadEngine(
  { env, holder, kvStore, metrics }: ShardEngineSite,
  deadlines: LoadDeadlines,
): Promise<Engine> {
  const model = modelName(env);
  const places = { ...modelLocations(env), deadlines };
  const started = Date.now();
  const { source, kind } = await modelSourceFor(model, places);
  // Unset: the folder's default weights (its GGUF file when config.json names one, else fp32).
  const dtype = (env.MODEL_DTYPE?.trim() || undefined) as ModelDtype | undefined;
  const draftName = env.DRAFT_MODEL?.trim();
  // The draft lives beside the target (same bucket or assets); a MODEL_URL names one folder, the target's.
  const draft = draftName
    ? { source: (await modelSourceFor(draftName, { ...places, url: undefined })).source }
    : undefined;
  const speculative = speculativeVar(env);
  const stages = pipelineStagesVar(env);
  const kvDtype = kvDtypeVar(env);
  // This shard's stage objects: one per stage Worker, named for the head and the shard, so its KV blocks are its own.
  const pipeline = stages
    ? {
        stages,
        model,
        links: stageLinks(env, stages, holder),
        kvDtype,
        microBatches: microBatchesVar(env),
        stageWaitMs: stageWaitVar(env),
        inFlight: inFlightVar(env),
        vocab: pipelineVocabVar(env),
      }
    : undefined;
  // A GPU host runs the model: this object keeps the engine's bookkeeping and holds no weights, so it shares
  // nothing with the isolate's other objects (each has its own session, and its own connection, to the host).
  const host = gpuHostVar(env);
  const gpuHost = host && { link: httpHostLink(host.url, host.secret), model, kvDtype };
  const engine = await Engine.load(shardRuntime(env), source, {
    modelId: model,
    dtype,
    draft,
    speculative: speculative && resolveSpeculativeParams(speculative, draft !== undefined, undefined, 'SPECULATIVE'),
    kvCacheBytes: intVar(env, 'KV_CACHE_MB') * 2 ** 20,
    adapterCacheBytes: adapterCacheVar(env),
    kvDtype,
    pipeline,
    chatTemplate: env.CHAT_TEMPLATE?.trim() || undefined,
    memoryBudgetBytes: intVar(env, 'MEMORY_BUDGET_MB') * 2 ** 20,
    maxBatchSize: intVar(env, 'MAX_BATCH'),
    anyJsonWhitespace: anyJsonWhitespaceVar(env),
    kvStore: kvStore(),
    gpuHost,
    // One copy of the weights for every shard this isolate runs; each shard's pool sized so all of them fit.
    isolate: gpuHost
      ? undefined
      : {
          models: isolateModels,
          holder,
          source: `${kind}:${model}`,
          engines: intVar(env, 'SHARD_COUNT'),
        },
  });
  // Wall time: in production the clock moves only across I/O, which is most of a load.
  metrics.loaded({ seconds: (Date.now() - started) / 1000, source: kind });
  return engine;
}

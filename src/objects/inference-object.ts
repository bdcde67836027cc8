import { DurableObject } from 'cloudflare:workers';
import { Engine } from '../engine/engine.js';
import type { ModelDtype } from '../engine/model/model-files.js';
import type { GenerationRequest } from '../engine/request.js';
import { resolveSpeculativeParams } from '../engine/speculative/speculative-params.js';
import {
  anyJsonWhitespaceVar,
  intVar,
  kvDtypeVar,
  kvStoreBytesVar,
  modelName,
  speculativeVar,
  type Env,
} from '../env.js';
import type { KvBlockStore } from '../engine/kv/block-store.js';
import { SqlKvBlockStore } from './kv-block-store.js';
import { InvalidRequestError } from '../engine/errors.js';
import { modelSourceFor } from '../sources/model-source.js';
import { runGeneration, type EventSink } from './generation.js';
import { ServiceMetrics, type ShardStats } from './metrics.js';
import { poolView, type PoolView } from './pool-view.js';
import { fail, fromEngineError, ok, type RpcResult, type ServiceError } from './rpc-error.js';
import type { JobView } from './jobs.js';
import type { SamplingFields, SessionView } from './sessions.js';
import { createShardServices, type ShardServices } from './shard-services.js';
import { shardRuntime } from './shard-runtime.js';
import type { HookView } from './webhooks/hooks.js';
import type { AcceptedEvent, HookInput } from './webhooks/service.js';

const overloaded = (): ServiceError => ({
  status: 429,
  type: 'rate_limit_error',
  message: 'the model is overloaded; retry shortly',
  param: null,
  code: 'overloaded',
});

/**
 * One shard of the service: a Durable Object that loads the engine once (lazily, on first use) and serves
 * the worker over RPC. It stays thin: generation, metrics, sessions, jobs and webhooks live in their own
 * modules next to this one, and each RPC method here only wires one of them to the engine and storage.
 * Methods return RpcResult values for client errors (see rpc-error.ts); a thrown error means a bug.
 */
export class InferenceObject extends DurableObject<Env> {
  private enginePromise: Promise<Engine> | undefined;
  private loaded: Engine | undefined;
  readonly metrics = new ServiceMetrics();

  /** The engine, loaded on first call; concurrent first callers share one load, and a failed load is retried next time. */
  protected engine(): Promise<Engine> {
    this.enginePromise ??= this.loadEngine().then(
      (engine) => (this.loaded = engine),
      (err: unknown) => {
        this.enginePromise = undefined;
        throw err;
      },
    );
    return this.enginePromise;
  }

  private async loadEngine(): Promise<Engine> {
    const model = modelName(this.env);
    const places = {
      bucket: this.env.MODEL_BUCKET,
      assets: this.env.MODELS,
      url: this.env.MODEL_URL?.trim() || undefined,
    };
    const { source } = await modelSourceFor(model, places);
    const dtype = (this.env.MODEL_DTYPE?.trim() || 'fp32') as ModelDtype;
    const draftName = this.env.DRAFT_MODEL?.trim();
    // The draft lives beside the target (same bucket or assets); a MODEL_URL names one folder, the target's.
    const draft = draftName
      ? { source: (await modelSourceFor(draftName, { ...places, url: undefined })).source }
      : undefined;
    const speculative = speculativeVar(this.env);
    return Engine.load(shardRuntime(this.env), source, {
      modelId: model,
      dtype,
      draft,
      speculative: speculative && resolveSpeculativeParams(speculative, draft !== undefined, undefined, 'SPECULATIVE'),
      kvCacheBytes: intVar(this.env, 'KV_CACHE_MB') * 2 ** 20,
      kvDtype: kvDtypeVar(this.env),
      memoryBudgetBytes: intVar(this.env, 'MEMORY_BUDGET_MB') * 2 ** 20,
      maxBatchSize: intVar(this.env, 'MAX_BATCH'),
      anyJsonWhitespace: anyJsonWhitespaceVar(this.env),
      kvStore: this.kvStore,
    });
  }

  private blockStore: KvBlockStore | null | undefined;

  /** Full KV blocks in this object's SQLite (its tables made when first asked for); undefined when KV_STORE_MB is 0. */
  private get kvStore(): KvBlockStore | undefined {
    if (this.blockStore === undefined) {
      const budget = kvStoreBytesVar(this.env);
      this.blockStore =
        budget > 0
          ? new SqlKvBlockStore(this.ctx.storage.sql, (fn) => this.ctx.storage.transactionSync(fn), budget)
          : null;
    }
    return this.blockStore ?? undefined;
  }

  /**
   * The engine, or a 503 naming the model and why it cannot be served (missing files, an architecture,
   * operator or size the engine refuses): a configuration problem, not the client's and not a bug.
   */
  private async engineOrUnavailable(): Promise<RpcResult<Engine>> {
    try {
      return ok(await this.engine());
    } catch (err) {
      if (!(err instanceof InvalidRequestError)) throw err;
      return fail({
        status: 503,
        type: 'server_error',
        message: `model "${modelName(this.env)}" cannot be served: ${err.message}`,
        param: null,
        code: err.code,
      });
    }
  }

  /** Refuses new work while too many requests already wait for a batch slot (the worker answers 429). */
  private overloaded(engine: Engine): boolean {
    return engine.stats().queueDepth >= intVar(this.env, 'MAX_QUEUE');
  }

  /**
   * Runs `requests` together and pushes their events (WireEvents, see generation.ts) into `sink`, the
   * worker's EventChannel. When the worker's side is gone (client disconnected) the requests are cancelled.
   */
  async generate(requests: GenerationRequest[], sink: EventSink): Promise<RpcResult<{ started: true }>> {
    const loaded = await this.engineOrUnavailable();
    if (!loaded.ok) return loaded;
    const engine = loaded.value;
    if (this.overloaded(engine)) return fail(overloaded());
    try {
      runGeneration(engine, requests, this.metrics, sink);
      return ok({ started: true });
    } catch (err) {
      return fail(fromEngineError(err));
    }
  }

  /** Metrics for GET /metrics. Does not load the engine: a shard nobody used reports `engine: null`. */
  async stats(): Promise<ShardStats> {
    return this.metrics.snapshot(modelName(this.env), this.loaded?.stats() ?? null, this.kvStore?.usage());
  }

  /** The KV block pool for GET /v1/pool/{shard} (the playground). Like stats(), it never loads the engine. */
  async pool(): Promise<PoolView> {
    return poolView(this.loaded, modelName(this.env));
  }

  // ---- sessions, jobs, webhooks: their RPC methods go below, each delegating to its module ----

  private shardServices: ShardServices | undefined;

  /** Sessions, hooks and jobs over this object's SQLite (built on first use; their tables are created if missing). */
  private get services(): ShardServices {
    this.shardServices ??= createShardServices(
      {
        sql: this.ctx.storage.sql,
        engine: () => this.engine(),
        loadedEngine: () => this.loaded,
        metrics: this.metrics,
        model: modelName(this.env),
        kvStore: this.kvStore,
      },
      this.ctx.storage,
      this.env,
    );
    return this.shardServices;
  }

  /** A new session; its sampling defaults are checked now, so a bad one fails here and not at every message. */
  async createSession(
    id: string,
    init: { system?: string; defaults?: SamplingFields },
  ): Promise<RpcResult<SessionView>> {
    if (init.defaults) {
      const loaded = await this.engineOrUnavailable();
      if (!loaded.ok) return loaded;
      const engine = loaded.value;
      try {
        engine.resolve({ ...init.defaults, prompt: 'defaults check' });
      } catch (err) {
        const error = fromEngineError(err);
        return fail({ ...error, param: `defaults.${error.param ?? ''}`.replace(/\.$/, '') });
      }
    }
    return ok(this.services.sessions.create(id, init));
  }

  async getSession(id: string): Promise<RpcResult<SessionView>> {
    return this.services.sessions.get(id);
  }

  async deleteSession(id: string): Promise<RpcResult<{ id: string; object: 'session'; deleted: true }>> {
    return this.services.sessions.delete(id);
  }

  /** A session turn: its events go to `sink` as generate()'s do; a client that goes away cancels the turn. */
  async sessionMessage(
    id: string,
    content: string,
    overrides: SamplingFields,
    sink: EventSink,
  ): Promise<RpcResult<{ started: true }>> {
    // An unknown session is a 404 from storage alone: it must never cost a model load.
    const known = this.services.sessions.get(id);
    if (!known.ok) return known;
    const loaded = await this.engineOrUnavailable();
    if (!loaded.ok) return loaded;
    const engine = loaded.value;
    if (this.overloaded(engine)) return fail(overloaded());
    return this.services.sessions.message(id, content, overrides, sink);
  }

  async putHook(name: string, input: HookInput): Promise<RpcResult<{ hook: HookView; created: boolean }>> {
    return this.services.webhooks.putHook(name, input);
  }

  async getHook(name: string): Promise<RpcResult<HookView>> {
    return this.services.webhooks.getHook(name);
  }

  async deleteHook(name: string): Promise<RpcResult<{ name: string; object: 'hook'; deleted: true }>> {
    return this.services.webhooks.deleteHook(name);
  }

  /** An inbound webhook event (raw body and its three webhook-* headers); a new job gets `jobId`. */
  async receiveHookEvent(
    name: string,
    headers: Record<string, string>,
    body: string,
    jobId: string,
  ): Promise<RpcResult<AcceptedEvent>> {
    return this.services.webhooks.receive(name, headers, body, jobId);
  }

  async getJob(id: string): Promise<RpcResult<JobView>> {
    return this.services.webhooks.job(id);
  }

  /** Webhook jobs: delivery retries, and generating jobs an earlier instance left unfinished. */
  override async alarm(): Promise<void> {
    await this.services.webhooks.dispatcher.onAlarm();
  }
}

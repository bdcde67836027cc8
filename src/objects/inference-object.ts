import { listAdapters } from '../engine/adapters/adapter-cache.js';
import { DurableObject } from 'cloudflare:workers';
import type { Engine } from '../engine/engine.js';
import { isolateModels } from '../engine/runners/isolate-models.js';
import type { GenerationRequest } from '../engine/request.js';
import { boolVar, intVar, kvStoreBytesVar, modelName, type Env } from '../env.js';
import { RunnerUnavailableError } from '../engine/runners/runner-unavailable.js';
import type { StageStats } from '../engine/runners/model-runner.js';
import type { KvBlockStore } from '../engine/kv/block-store.js';
import { SqlKvBlockStore } from './kv-block-store.js';
import { loadShardEngine } from './engine-load.js';
import { GenerationAdmission, type Started } from './generation-admission.js';
import { loadRequestsAdapter, runGeneration, type Account, type EventSink } from './generation-run.js';
import {
  declaredContext,
  gpuHostView,
  planRunner,
  readDeclaredModel,
  type DeclaredModel,
  type GpuHostView,
} from './model-info.js';
import { ServiceMetrics, type IsolateUse, type ShardStats } from './service-metrics.js';
import { poolView, type PoolView } from './pool-view.js';
import { detokenizeWith, tokenizeWith, type Tokenized } from './tokenize.js';
import { runEmbeddings, type EmbeddingInput, type EmbeddingOptions, type EmbeddingsResult } from './embeddings.js';
import { fail, fromEngineError, ok, runnerUnavailable, type RpcResult, type ServiceError } from './rpc-error.js';
import { modelUnavailable } from './model-unavailable.js';
import { quotaRefusal, storageQuotas, systemRefusal } from './tenancy/storage-quota.js';
import type { JobView } from './jobs.js';
import type { InputItem } from '../responses/output-items.js';
import type { ConversationItem } from '../responses/conversation-items.js';
import type { ConversationDeleted, ConversationOp, ConversationView } from './conversations.js';
import { promptReasoning, reasoningOf } from './template-reasoning.js';
import type { ReasoningFormat } from '../responses/reasoning.js';
import type { ResponseSpec, ResponseView } from '../responses/response-view.js';
import type { SamplingFields, SessionView } from './sessions.js';
import { createShardServices, storedUse, type ShardServices } from './shard-services.js';
import type { HookView } from './webhooks/hooks.js';
import type { AcceptedEvent, HookAddress, HookInput } from './webhooks/service.js';
import type { ShardLimits } from './tenancy/rate-limit-config.js';
import { RateLimiter } from './tenancy/rate-limiter.js';
import type { Caller, Tenant } from './tenancy/tenant.js';

export type { GpuHostView, Started };

/**
 * The reasoning format of a chat request's answer, for a model whose tokenizer has reasoning tags (none
 * else: then nothing is rendered twice). Every request of a batch shares the first one's: the worker
 * splits all choices alike.
 */
function chatReasoning(engine: Engine, requests: GenerationRequest[]): ReasoningFormat | undefined {
  const first = requests[0];
  if (!first?.messages || !reasoningOf(engine).tags) return undefined;
  return promptReasoning(engine, engine.resolve(first).promptIds);
}

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
  private readonly limiter = new RateLimiter();
  private readonly admission = new GenerationAdmission(this.limiter, () => intVar(this.env, 'MAX_QUEUE'));

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // An alarm whose time passed can sit in storage unfired (workerd stopped while it ran), and nothing
    // else re-arms it until a new job arrives: set again when the object wakes, before any request. Only
    // the alarm is read here; the tables are made when first used, as before.
    void ctx.blockConcurrencyWhile(async () => {
      const at = await ctx.storage.getAlarm();
      if (at !== null && at <= Date.now()) await ctx.storage.setAlarm(Date.now());
    });
  }

  /** The engine, loaded on first call; concurrent first callers share one load, and a failed load is retried next time. */
  protected engine(): Promise<Engine> {
    this.enginePromise ??= loadShardEngine({
      env: this.env,
      holder: this.ctx.id.toString(),
      kvStore: () => this.kvStore,
      metrics: this.metrics,
    }).then(
      (engine) => (this.loaded = engine),
      (err: unknown) => {
        this.enginePromise = undefined;
        throw err;
      },
    );
    return this.enginePromise;
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
      const away = RunnerUnavailableError.in(err);
      if (away) return fail(runnerUnavailable(away));
      return fail(modelUnavailable(this.env, err));
    }
  }

  /**
   * Runs `requests` together for `caller` and pushes their events (WireEvents, see generation-run.ts) into
   * `sink`, the worker's EventChannel. When the worker's side is gone (client disconnected) the requests
   * are cancelled.
   */
  async generate(requests: GenerationRequest[], sink: EventSink, caller: Caller): Promise<RpcResult<Started>> {
    const sequences = requests.reduce((count, r) => count + (r.n ?? 1), 0);
    return this.admission.generation(await this.engineOrUnavailable(), caller, sequences, async (engine, onSettled) => {
      try {
        const account = this.accountOf(caller.tenant.owner, caller.tenant.name);
        const adapter = await loadRequestsAdapter(engine, requests);
        const generation = runGeneration(engine, requests, this.metrics, sink, { account, adapter });
        void generation.finished.then(
          ({ completionTokens }) => onSettled(completionTokens),
          () => onSettled(0),
        );
        return ok({ reasoning: chatReasoning(engine, requests) });
      } catch (err) {
        return fail(fromEngineError(err));
      }
    });
  }

  /** Metrics for GET /metrics. Does not load the engine: a shard nobody used reports `engine: null`. */
  async stats(): Promise<ShardStats> {
    const stats = this.metrics.snapshot(
      modelName(this.env),
      this.loaded?.stats() ?? null,
      this.kvStore?.usage(),
      this.limiter.snapshot(),
    );
    const isolate = await this.isolate();
    const withStored = { ...stats, stored: storedUse(this.services) };
    return isolate ? { ...withStored, isolate } : withStored;
  }

  /** The isolate's counted memory and the objects sharing the weights, once this shard's engine is loaded (else null). */
  async isolate(): Promise<IsolateUse | null> {
    if (!this.loaded) return null;
    const { countedBytes, models } = isolateModels.snapshot();
    return { countedBytes, objects: models.reduce((n, m) => n + m.holders, 0) };
  }

  /** The pipeline stages of the loaded engine (their layers and isolates), for GET /v1/models; null before a load or without stages. */
  async stages(): Promise<StageStats[] | null> {
    return this.loaded?.runner.stats().stages ?? null;
  }

  /** The runner of the loaded engine (`kernels` or `onnxruntime`) for GET /v1/models; null before a load, which this never starts. */
  async runner(): Promise<string | null> {
    return this.loaded?.runner.stats().runner ?? null;
  }

  /**
   * The GPU host that runs the model (GPU_HOST_URL), for GET /v1/models: as the loaded engine knows it, else asked
   * of the host now (no session opened, nothing loaded); null without one, or where it cannot be reached.
   */
  async gpuHost(): Promise<GpuHostView | null> {
    return gpuHostView(this.env, this.loaded);
  }

  private planned: Promise<string | null> | undefined;
  private declared: Promise<DeclaredModel> | undefined;

  /**
   * The model's folder and the config.json it declares, read once for GET /v1/models however often it is
   * asked (a failed read is tried again next time): a probe polling /v1/models must not fetch the files each time.
   */
  private declaredModel(): Promise<DeclaredModel> {
    this.declared ??= readDeclaredModel(this.env).catch((err: unknown) => {
      this.declared = undefined;
      throw err;
    });
    return this.declared;
  }

  /**
   * The runner the engine will run on, for GET /v1/models before any shard has loaded it: the loaded one once
   * there is one, else planned from config.json and the weights the folder's rule chooses (existence checks,
   * no weights read; runner-plan.ts). Null where that cannot be known (the folder is missing or refused: the
   * first request says why). A failed plan is tried again next time.
   */
  async plannedRunner(): Promise<string | null> {
    if (this.loaded) return this.runner();
    this.planned ??= planRunner(this.env, () => this.declaredModel()).catch(() => {
      this.planned = undefined;
      return null;
    });
    return this.planned;
  }

  /** Whom a generation runs for: usage under the key's name, fair queueing and a private prefix cache per owner. */
  private accountOf(owner: string, keyName: string): Account {
    const shared = boolVar(this.env, 'SHARED_PREFIX_CACHE');
    return { keyName, fairnessGroup: owner, cacheSalt: shared ? undefined : owner };
  }

  /** POST /v1/embeddings: a vector per input, each a prefill-only request in this shard's batch (embeddings.ts). */
  async embeddings(
    inputs: EmbeddingInput[],
    options: EmbeddingOptions,
    caller: Caller,
  ): Promise<RpcResult<EmbeddingsResult>> {
    const { fairnessGroup, cacheSalt } = this.accountOf(caller.tenant.owner, caller.tenant.name);
    const maxQueue = intVar(this.env, 'MAX_QUEUE');
    const engine = await this.engineOrUnavailable();
    return runEmbeddings(engine, this.admission, maxQueue, caller, { fairnessGroup, cacheSalt }, inputs, options);
  }

  /** POST /tokenize (vLLM's): loads the model as a generation would. */
  async tokenize(prompt: string, addSpecialTokens: boolean): Promise<RpcResult<Tokenized>> {
    const loaded = await this.engineOrUnavailable();
    return loaded.ok ? tokenizeWith(loaded.value, prompt, addSpecialTokens) : loaded;
  }

  /** POST /detokenize (vLLM's). */
  async detokenize(tokens: number[]): Promise<RpcResult<{ prompt: string }>> {
    const loaded = await this.engineOrUnavailable();
    return loaded.ok ? detokenizeWith(loaded.value, tokens) : loaded;
  }

  /** The model's context (max_model_len of GET /v1/models): the loaded engine's, else config.json's; null where unreadable. */
  async maxModelLen(): Promise<number | null> {
    if (this.loaded) return this.loaded.config.maxPositionEmbeddings;
    return this.declaredModel().then(declaredContext, () => null);
  }

  /** The LoRA adapters the model's folder lists (adapters/index.json) for GET /v1/models; [] where unreadable. */
  async adapters(): Promise<string[]> {
    this.adapterNames ??= this.declaredModel().then(
      ({ source }) => listAdapters(source),
      () => [],
    );
    return this.adapterNames;
  }

  /** The adapters' names, read once an object (a deploy that changes the folder's index restarts it). */
  private adapterNames: Promise<string[]> | undefined;

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
        limiter: this.limiter,
        cacheSalt: (owner) => this.accountOf(owner, '').cacheSalt,
        unavailable: (err) => modelUnavailable(this.env, err),
        model: modelName(this.env),
        kvStore: this.kvStore,
      },
      this.ctx.storage,
      this.env,
    );
    return this.shardServices;
  }

  /** A new session of `tenant`'s; its sampling defaults are checked now, so a bad one fails here and not at every message. */
  async createSession(
    id: string,
    tenant: Tenant,
    init: { system?: string; defaults?: SamplingFields },
    limits?: ShardLimits,
  ): Promise<RpcResult<SessionView>> {
    // Creating costs the shard a write (and a defaults check): it takes a request slot like a generation.
    const charged = this.admission.charge(tenant.name, limits);
    if (!charged.ok) return charged;
    const tooLong = systemRefusal(init.system);
    if (tooLong) return fail(tooLong);
    const full = (): ServiceError | undefined => {
      const { sessionsPerKey } = storageQuotas(this.env);
      const count = this.services.sessions.countOf(tenant.owner);
      return count >= sessionsPerKey
        ? quotaRefusal('sessions', count, sessionsPerKey, 'MAX_SESSIONS_PER_KEY')
        : undefined;
    };
    // Checked before the defaults (no model load for a key at its cap) and again, with no await, just before the
    // write: creations that waited on the load together must not all pass one count.
    const before = full();
    if (before) return fail(before);
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
      // A session on a LoRA adapter (its `model`): a name the model has not, or a bad adapter, is refused now.
      if (init.defaults.adapter !== undefined) {
        try {
          await engine.loadAdapter(init.defaults.adapter);
        } catch (err) {
          return fail({ ...fromEngineError(err), param: 'model' });
        }
      }
    }
    const after = full();
    if (after) return fail(after);
    return ok(this.services.sessions.create(id, tenant, init));
  }

  async getSession(id: string, tenant: Tenant): Promise<RpcResult<SessionView>> {
    return this.services.sessions.get(id, tenant);
  }

  async deleteSession(
    id: string,
    tenant: Tenant,
  ): Promise<RpcResult<{ id: string; object: 'session'; deleted: true }>> {
    return this.services.sessions.delete(id, tenant);
  }

  /** A session turn: its events go to `sink` as generate()'s do; a client that goes away cancels the turn. */
  async sessionMessage(
    id: string,
    content: string,
    overrides: SamplingFields,
    sink: EventSink,
    caller: Caller,
  ): Promise<RpcResult<Started>> {
    // An unknown session (or another tenant's) is a 404 from storage alone: it must never cost a model load.
    const known = this.services.sessions.get(id, caller.tenant);
    if (!known.ok) return known;
    return this.admission.generation(await this.engineOrUnavailable(), caller, 1, async (_engine, onSettled) => {
      const account = this.accountOf(caller.tenant.owner, caller.tenant.name);
      const result = await this.services.sessions.message(id, caller.tenant, content, overrides, sink, {
        account,
        onSettled,
      });
      return result.ok ? ok({}) : result;
    });
  }

  /**
   * A response of the Responses API (objects/responses.ts): its events go to `sink` as generate()'s do,
   * the last done event carrying the finished response. Also says how the model marks reasoning, so the
   * worker can stream it apart.
   */
  async createResponse(spec: ResponseSpec, sink: EventSink, caller: Caller): Promise<RpcResult<Started>> {
    return this.admission.generation(await this.engineOrUnavailable(), caller, 1, (_engine, onSettled) => {
      const account = this.accountOf(caller.tenant.owner, caller.tenant.name);
      return this.services.responses.start(spec, caller.tenant, sink, { account, onSettled });
    });
  }

  async getResponse(id: string, tenant: Tenant): Promise<RpcResult<ResponseView>> {
    return this.services.responses.get(id, tenant);
  }

  async responseInputItems(id: string, tenant: Tenant): Promise<RpcResult<InputItem[]>> {
    return this.services.responses.inputItems(id, tenant);
  }

  async deleteResponse(
    id: string,
    tenant: Tenant,
  ): Promise<RpcResult<{ id: string; object: 'response'; deleted: true }>> {
    return this.services.responses.delete(id, tenant);
  }

  // ---- conversations (objects/conversations.ts): storage only, a response in one goes through createResponse ----

  /** Writes that grow a key's storage (a new conversation, added items) take a request slot, as a session's creation does. */
  private admitWrite(caller: Caller): RpcResult<void> {
    return this.admission.charge(caller.tenant.name, caller.limits);
  }

  async createConversation(
    id: string,
    caller: Caller,
    metadata: Record<string, string>,
    items: ConversationItem[],
  ): Promise<RpcResult<ConversationView>> {
    const admitted = this.admitWrite(caller);
    if (!admitted.ok) return admitted;
    return this.services.conversations.create(id, caller.tenant, metadata, items);
  }

  async conversation(
    op: ConversationOp,
    id: string,
    caller: Caller,
  ): Promise<RpcResult<ConversationView | ConversationItem | ConversationItem[] | ConversationDeleted>> {
    const store = this.services.conversations;
    const { tenant } = caller;
    if (op.op === 'addItems') {
      const admitted = this.admitWrite(caller);
      if (!admitted.ok) return admitted;
    }
    switch (op.op) {
      case 'get':
        return store.get(id, tenant);
      case 'update':
        return store.update(id, tenant, op.metadata);
      case 'delete':
        return store.delete(id, tenant);
      case 'items':
        return store.items(id, tenant);
      case 'addItems':
        return store.addItems(id, tenant, op.items);
      case 'getItem':
        return store.getItem(id, op.itemId, tenant);
      case 'deleteItem':
        return store.deleteItem(id, op.itemId, tenant);
    }
  }

  /**
   * Creates or replaces `tenant`'s hook; a new one gets the path id `id`. With `create` unset only an
   * existing hook is replaced (the worker looks for a tenant's hook on more than one shard).
   */
  async putHook(
    tenant: Tenant,
    name: string,
    input: HookInput,
    id: string,
    create: boolean,
    limits?: ShardLimits,
    selfHost?: string,
  ): Promise<RpcResult<{ hook: HookView; created: boolean }>> {
    // Like a session, a hook's creation or replacement takes a request slot.
    const charged = this.admission.charge(tenant.name, limits);
    if (!charged.ok) return charged;
    return this.services.webhooks.putHook(tenant, name, input, id, create, selfHost);
  }

  async getHook(tenant: Tenant, name: string): Promise<RpcResult<HookView>> {
    return this.services.webhooks.getHook(tenant, name);
  }

  async deleteHook(tenant: Tenant, name: string): Promise<RpcResult<{ name: string; object: 'hook'; deleted: true }>> {
    return this.services.webhooks.deleteHook(tenant, name);
  }

  /**
   * An inbound webhook event (raw body and its three webhook-* headers) for the hook `address` names; a
   * new job gets `jobId` and counts against its hook owner's share of the limits (`limits`, this shard's).
   */
  async receiveHookEvent(
    address: HookAddress,
    headers: Record<string, string>,
    body: Uint8Array,
    jobId: string,
    limits: ShardLimits,
  ): Promise<RpcResult<AcceptedEvent>> {
    return this.services.webhooks.receive(address, headers, body, jobId, (name) => this.admission.admit(name, limits));
  }

  async getJob(id: string, tenant: Tenant): Promise<RpcResult<JobView>> {
    return this.services.webhooks.job(id, tenant);
  }

  /** Webhook jobs: delivery retries, and generating jobs an earlier instance left unfinished. */
  override async alarm(): Promise<void> {
    await this.services.webhooks.dispatcher.onAlarm();
  }
}

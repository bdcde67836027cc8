import { DurableObject } from 'cloudflare:workers';
import { Engine } from '../engine/engine.js';
import { isolateModels } from '../engine/runners/isolate-models.js';
import type { ModelDtype } from '../engine/model/model-files.js';
import type { GenerationRequest } from '../engine/request.js';
import { resolveSpeculativeParams } from '../engine/speculative/speculative-params.js';
import {
  anyJsonWhitespaceVar,
  boolVar,
  intVar,
  kvDtypeVar,
  kvStoreBytesVar,
  modelLocations,
  modelName,
  inFlightVar,
  microBatchesVar,
  pipelineVocabVar,
  pipelineStagesVar,
  speculativeVar,
  gpuHostVar,
  type Env,
} from '../env.js';
import { HostUnavailableError, httpHostLink } from '../engine/runners/remote/host-link.js';
import { hostInfo } from '../engine/runners/remote/remote-runner.js';
import { stageLinks } from './stage-links.js';
import type { StageStats } from '../engine/runners/model-runner.js';
import type { KvBlockStore } from '../engine/kv/block-store.js';
import { SqlKvBlockStore } from './kv-block-store.js';
import { modelSourceFor } from '../sources/model-source.js';
import { chooseWeights } from '../engine/model/default-weights.js';
import { plannedRunner } from '../engine/runners/runner-plan.js';
import { runGeneration, type Account, type EventSink } from './generation-run.js';
import { ServiceMetrics, type IsolateUse, type ShardStats } from './service-metrics.js';
import { poolView, type PoolView } from './pool-view.js';
import { configuredContext, detokenizeWith, tokenizeWith, type Tokenized } from './tokenize.js';
import { fail, fromEngineError, hostUnavailable, ok, type RpcResult, type ServiceError } from './rpc-error.js';
import { queueRefusal } from './tenancy/queue-share.js';
import { modelUnavailable } from './model-unavailable.js';
import { LoadTimeoutError, type LoadDeadlines } from '../sources/load-deadline.js';
import { quotaRefusal, storageQuotas, systemRefusal, type StoredUse } from './tenancy/storage-quota.js';
import type { JobView } from './jobs.js';
import type { InputItem } from '../responses/output-items.js';
import type { ConversationItem } from '../responses/conversation-items.js';
import type { ConversationDeleted, ConversationOp, ConversationView } from './conversations.js';
import { promptReasoning, reasoningOf } from './template-reasoning.js';
import type { ReasoningFormat } from '../responses/reasoning.js';
import type { ResponseSpec, ResponseView } from '../responses/response-view.js';
import type { SamplingFields, SessionView } from './sessions.js';
import { createShardServices, type ShardServices } from './shard-services.js';
import { shardRuntime } from './shard-runtime.js';
import type { HookView } from './webhooks/hooks.js';
import type { AcceptedEvent, HookAddress, HookInput } from './webhooks/service.js';
import { shardQuota, type ShardLimits } from './tenancy/rate-limit-config.js';
import { RateLimiter, type Admission, type RateLimitState, type Ticket } from './tenancy/rate-limiter.js';
import type { Caller, Tenant } from './tenancy/tenant.js';

/** A GPU host as /v1/models shows it: what runs the model there, and whether this shard has a session open. */
export interface GpuHostView {
  runner: string;
  backend: string | null;
  adapter: string | null;
  connected: boolean;
}

/** A generation handed to the engine; `rateLimit` is its key's limits after it (absent when it has none). */
export interface Started {
  started: true;
  rateLimit?: RateLimitState;
  /** How the model marks reasoning in this prompt's answer (chat prompts of models that reason), for the worker to split it off. */
  reasoning?: ReasoningFormat;
}

const LIMIT_WORDS = {
  requests: 'requests per minute',
  tokens: 'generated tokens per minute',
  concurrent: 'concurrent requests',
} as const;

/** A 429 naming the key (by name), the limit and this shard's share of it. */
function rateLimited(name: string, refusal: Extract<Admission, { ok: false }>): ServiceError {
  const retry = Math.ceil((refusal.state.retryAfterMs ?? 1000) / 1000);
  return {
    status: 429,
    type: refusal.refused === 'tokens' ? 'tokens' : 'requests',
    message: `rate limit reached for key '${name}': ${LIMIT_WORDS[refusal.refused]} (this shard's share of the limit: ${refusal.limit}); retry in ${retry} s`,
    param: null,
    code: refusal.refused === 'concurrent' ? 'concurrency_limit_exceeded' : 'rate_limit_exceeded',
    rateLimit: refusal.state,
  };
}

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

const started = (rateLimit: RateLimitState): Started =>
  rateLimit.requests || rateLimit.tokens ? { started: true, rateLimit } : { started: true };

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
    this.enginePromise ??= this.loadWithDeadline().then(
      (engine) => (this.loaded = engine),
      (err: unknown) => {
        this.enginePromise = undefined;
        throw err;
      },
    );
    return this.enginePromise;
  }

  /**
   * loadEngine under MODEL_LOAD_TIMEOUT_MS in all and MODEL_STALL_TIMEOUT_MS per chunk read: past either, its
   * reads are stopped and it fails, so a stalled source never holds the shard (the next request loads again).
   */
  private loadWithDeadline(): Promise<Engine> {
    const totalMs = intVar(this.env, 'MODEL_LOAD_TIMEOUT_MS');
    const stop = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const err = new LoadTimeoutError(`loading took longer than ${totalMs} ms (MODEL_LOAD_TIMEOUT_MS)`);
        stop.abort(err);
        reject(err);
      }, totalMs);
    });
    const load = this.loadEngine({ stallMs: intVar(this.env, 'MODEL_STALL_TIMEOUT_MS'), signal: stop.signal });
    return Promise.race([load, deadline]).finally(() => clearTimeout(timer));
  }

  private async loadEngine(deadlines: LoadDeadlines): Promise<Engine> {
    const model = modelName(this.env);
    const places = { ...modelLocations(this.env), deadlines };
    const started = Date.now();
    const { source, kind } = await modelSourceFor(model, places);
    // Unset: the folder's default weights (its GGUF file when config.json names one, else fp32).
    const dtype = (this.env.MODEL_DTYPE?.trim() || undefined) as ModelDtype | undefined;
    const draftName = this.env.DRAFT_MODEL?.trim();
    // The draft lives beside the target (same bucket or assets); a MODEL_URL names one folder, the target's.
    const draft = draftName
      ? { source: (await modelSourceFor(draftName, { ...places, url: undefined })).source }
      : undefined;
    const speculative = speculativeVar(this.env);
    const stages = pipelineStagesVar(this.env);
    const kvDtype = kvDtypeVar(this.env);
    // This shard's stage objects: one per stage Worker, named after the shard, so its KV blocks are its own.
    const pipeline = stages
      ? {
          stages,
          model,
          links: stageLinks(this.env, stages, this.ctx.id.toString()),
          kvDtype,
          microBatches: microBatchesVar(this.env),
          inFlight: inFlightVar(this.env),
          vocab: pipelineVocabVar(this.env),
        }
      : undefined;
    // A GPU host runs the model: this object keeps the engine's bookkeeping and holds no weights, so it shares
    // nothing with the isolate's other objects (each has its own session, and its own connection, to the host).
    const host = gpuHostVar(this.env);
    const gpuHost = host && { link: httpHostLink(host.url, host.secret), model, kvDtype };
    const engine = await Engine.load(shardRuntime(this.env), source, {
      modelId: model,
      dtype,
      draft,
      speculative: speculative && resolveSpeculativeParams(speculative, draft !== undefined, undefined, 'SPECULATIVE'),
      kvCacheBytes: intVar(this.env, 'KV_CACHE_MB') * 2 ** 20,
      kvDtype,
      pipeline,
      chatTemplate: this.env.CHAT_TEMPLATE?.trim() || undefined,
      memoryBudgetBytes: intVar(this.env, 'MEMORY_BUDGET_MB') * 2 ** 20,
      maxBatchSize: intVar(this.env, 'MAX_BATCH'),
      anyJsonWhitespace: anyJsonWhitespaceVar(this.env),
      kvStore: this.kvStore,
      gpuHost,
      // One copy of the weights for every shard this isolate runs; each shard's pool sized so all of them fit.
      isolate: gpuHost
        ? undefined
        : {
            models: isolateModels,
            holder: this.ctx.id.toString(),
            source: `${kind}:${model}`,
            engines: intVar(this.env, 'SHARD_COUNT'),
          },
    });
    // Wall time: in production the clock moves only across I/O, which is most of a load.
    this.metrics.loaded({ seconds: (Date.now() - started) / 1000, source: kind });
    return engine;
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
      if (err instanceof HostUnavailableError) return fail(hostUnavailable(err));
      return fail(modelUnavailable(this.env, err));
    }
  }

  /**
   * Refuses new work of `owner` (`sequences` places) when the queue is full, or when the owner holds its
   * fair share of it while other keys wait (tenancy/queue-share.ts): the 429 to answer, else undefined.
   */
  private overloaded(engine: Engine, owner: string, sequences: number): ServiceError | undefined {
    return queueRefusal(engine, intVar(this.env, 'MAX_QUEUE'), owner, sequences);
  }

  /**
   * Admits a request of key `name` against this shard's share of its limits (the worker reads RATE_LIMITS
   * and sends them): a ticket to settle when it ends, or a 429.
   */
  private admit(name: string, limits: ShardLimits): RpcResult<{ ticket: Ticket; state: RateLimitState }> {
    const admission = this.limiter.admit(name, shardQuota(limits, name));
    if (!admission.ok) return fail(rateLimited(name, admission));
    return ok({ ticket: admission.ticket, state: admission.state });
  }

  /**
   * Runs `requests` together for `caller` and pushes their events (WireEvents, see generation-run.ts) into
   * `sink`, the worker's EventChannel. When the worker's side is gone (client disconnected) the requests
   * are cancelled.
   */
  async generate(requests: GenerationRequest[], sink: EventSink, caller: Caller): Promise<RpcResult<Started>> {
    const loaded = await this.engineOrUnavailable();
    if (!loaded.ok) return loaded;
    const engine = loaded.value;
    const sequences = requests.reduce((count, r) => count + (r.n ?? 1), 0);
    const full = this.overloaded(engine, caller.tenant.owner, sequences);
    if (full) return fail(full);
    const admitted = this.admit(caller.tenant.name, caller.limits);
    if (!admitted.ok) return admitted;
    const { ticket, state } = admitted.value;
    try {
      const account = this.accountOf(caller.tenant.owner, caller.tenant.name);
      const generation = runGeneration(engine, requests, this.metrics, sink, { account });
      void generation.finished.then(
        ({ completionTokens }) => ticket.settle(completionTokens),
        () => ticket.settle(0),
      );
      const reasoning = chatReasoning(engine, requests);
      return ok(reasoning ? { ...started(state), reasoning } : started(state));
    } catch (err) {
      // A refused request still used a slot: tokenising and checking it cost the shard its time.
      ticket.settle(0);
      return fail(fromEngineError(err));
    }
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
    const withStored = { ...stats, stored: this.storedUse() };
    return isolate ? { ...withStored, isolate } : withStored;
  }

  /** What each key keeps in this shard's storage (sessions, their bytes, hooks), by key name. */
  private storedUse(): Record<string, StoredUse> {
    const sessions = this.services.sessions.usageByKey();
    const hooks = this.services.hooks.countsByKey();
    const conversations = this.services.conversations.usageByKey();
    const use: Record<string, StoredUse> = {};
    for (const name of new Set([...Object.keys(sessions), ...Object.keys(hooks), ...Object.keys(conversations)]))
      use[name] = {
        sessions: sessions[name]?.sessions ?? 0,
        sessionBytes: sessions[name]?.bytes ?? 0,
        hooks: hooks[name] ?? 0,
        conversations: conversations[name]?.conversations ?? 0,
        conversationBytes: conversations[name]?.bytes ?? 0,
      };
    return use;
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
    let host: ReturnType<typeof gpuHostVar>;
    try {
      host = gpuHostVar(this.env);
    } catch {
      return null; // misconfigured: the first request says how
    }
    if (!host) return null;
    const known = this.loaded?.runner.stats().host;
    if (known)
      return { runner: known.runner, backend: known.backend, adapter: known.adapter, connected: known.connected };
    try {
      const info = await hostInfo(httpHostLink(host.url, host.secret, 10_000));
      return { runner: info.runner, backend: info.backend, adapter: info.adapter, connected: false };
    } catch {
      return null;
    }
  }

  private planned: Promise<string | null> | undefined;

  /**
   * The runner the engine will run on, for GET /v1/models before any shard has loaded it: the loaded one once
   * there is one, else planned from config.json and the weights the folder's rule chooses (existence checks,
   * no weights read; runner-plan.ts). Null where that cannot be known (the folder is missing or refused: the
   * first request says why). A failed plan is tried again next time.
   */
  async plannedRunner(): Promise<string | null> {
    if (this.loaded) return this.runner();
    this.planned ??= this.planRunner().catch(() => {
      this.planned = undefined;
      return null;
    });
    return this.planned;
  }

  private async planRunner(): Promise<string | null> {
    if (gpuHostVar(this.env)) return (await this.gpuHost())?.runner ?? null;
    const { source } = await modelSourceFor(modelName(this.env), modelLocations(this.env));
    const bytes = await source.read('config.json');
    if (!bytes) return null;
    const rawConfig = JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
    const asked = this.env.MODEL_DTYPE?.trim() || undefined;
    const { dtype } = await chooseWeights(source, rawConfig, asked, 'MODEL_DTYPE');
    return plannedRunner(shardRuntime(this.env), dtype, rawConfig, pipelineStagesVar(this.env) > 0);
  }

  /** Whom a generation runs for: usage under the key's name, fair queueing and a private prefix cache per owner. */
  private accountOf(owner: string, keyName: string): Account {
    const shared = boolVar(this.env, 'SHARED_PREFIX_CACHE');
    return { keyName, fairnessGroup: owner, cacheSalt: shared ? undefined : owner };
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
    try {
      return await configuredContext((await modelSourceFor(modelName(this.env), modelLocations(this.env))).source);
    } catch {
      return null;
    }
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
    if (limits) {
      const admitted = this.admit(tenant.name, limits);
      if (!admitted.ok) return admitted;
      admitted.value.ticket.settle(0);
    }
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
    const loaded = await this.engineOrUnavailable();
    if (!loaded.ok) return loaded;
    const engine = loaded.value;
    const full = this.overloaded(engine, caller.tenant.owner, 1);
    if (full) return fail(full);
    const admitted = this.admit(caller.tenant.name, caller.limits);
    if (!admitted.ok) return admitted;
    const { ticket, state } = admitted.value;
    const account = this.accountOf(caller.tenant.owner, caller.tenant.name);
    const result = await this.services.sessions.message(id, caller.tenant, content, overrides, sink, {
      account,
      onSettled: (completionTokens) => ticket.settle(completionTokens),
    });
    if (!result.ok) ticket.settle(0); // refused, but it used its slot (see generate)
    return result.ok ? ok(started(state)) : result;
  }

  /**
   * A response of the Responses API (objects/responses.ts): its events go to `sink` as generate()'s do,
   * the last done event carrying the finished response. Also says how the model marks reasoning, so the
   * worker can stream it apart.
   */
  async createResponse(spec: ResponseSpec, sink: EventSink, caller: Caller): Promise<RpcResult<Started>> {
    const loaded = await this.engineOrUnavailable();
    if (!loaded.ok) return loaded;
    const full = this.overloaded(loaded.value, caller.tenant.owner, 1);
    if (full) return fail(full);
    const admitted = this.admit(caller.tenant.name, caller.limits);
    if (!admitted.ok) return admitted;
    const { ticket, state } = admitted.value;
    const account = { keyName: caller.tenant.name, fairnessGroup: caller.tenant.owner };
    const result = await this.services.responses.start(spec, caller.tenant, sink, {
      account,
      onSettled: (completionTokens) => ticket.settle(completionTokens),
    });
    if (!result.ok) {
      ticket.settle(0);
      return result;
    }
    const { reasoning } = result.value;
    return ok(reasoning ? { ...started(state), reasoning } : started(state));
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
    const admitted = this.admit(caller.tenant.name, caller.limits);
    if (!admitted.ok) return admitted;
    admitted.value.ticket.settle(0);
    return ok(undefined);
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
    if (limits) {
      const admitted = this.admit(tenant.name, limits);
      if (!admitted.ok) return admitted;
      admitted.value.ticket.settle(0);
    }
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
    return this.services.webhooks.receive(address, headers, body, jobId, (name) => this.admit(name, limits));
  }

  async getJob(id: string, tenant: Tenant): Promise<RpcResult<JobView>> {
    return this.services.webhooks.job(id, tenant);
  }

  /** Webhook jobs: delivery retries, and generating jobs an earlier instance left unfinished. */
  override async alarm(): Promise<void> {
    await this.services.webhooks.dispatcher.onAlarm();
  }
}

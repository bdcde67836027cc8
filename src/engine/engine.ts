import type { AdapterCache } from './adapters/adapter-cache.js';
import type { LoraAdapter } from './adapters/lora-adapter.js';
import { Batch } from './batch.js';
import { ConstraintCompiler } from './constraints/compiler.js';
import { loadEngineParts, type EngineParts } from './engine-load.js';
import type { EngineOptions, GenerateOptions } from './engine-options.js';
import type { EngineStats } from './engine-stats.js';
import { InvalidRequestError } from './errors.js';
import { EventQueue } from './event-queue.js';
import { BlockPersistence } from './kv/block-persistence.js';
import { BlockPool } from './kv/block-pool.js';
import { BlockRestorer } from './kv/block-restorer.js';
import type { KvMemory } from './kv/kv-memory.js';
import { KvCacheManager } from './kv/paged-kv.js';
import { snapshotPool, type PoolSnapshot, type SequenceBlocks } from './kv/pool-snapshot.js';
import { SessionCaches } from './kv/session-caches.js';
import { kvBytesPerToken, kvPoolBlocks, type ModelConfig } from './model/config.js';
import type { ModelSource } from './model/model-files.js';
import type { EngineRuntime } from './model/runtime.js';
import type { Pooling } from './embeddings/pooling.js';
import { createMode, drawsOnDevice, startingSequences } from './modes/create-mode.js';
import { resolveRequest, type GenerationRequest, type ResolvedRequest } from './request.js';
import type { ModelRunner } from './runners/model-runner.js';
import { Scheduler } from './scheduler.js';
import { SequenceOutput, type GenerationEvent } from './sequence-output.js';
import { streamGroup, type RequestGroup, type Sequence } from './sequence.js';
import type { Speculator } from './speculative/speculator.js';
import { StepHistory, type StepRecord } from './step-history.js';
import { StepLoop, type StepLoopHost } from './step-loop.js';
import { newStepCounters, StepPipeline } from './step-pipeline.js';
import type { TextTokenizer } from '../tokenizer/tokenizer.js';
import { renderChat } from '../tokenizer/chat-template.js';
import { encodeChat } from '../tokenizer/chat-encoding.js';

export type { EngineOptions, GenerateOptions } from './engine-options.js';

/**
 * A loaded model serving many requests at once: tokenizer and chat template, a runner, a paged KV cache and a
 * continuous-batching scheduler. The engine wires its components and owns the requests' lives; each step is
 * the StepPipeline's (schedule, move KV bytes, propose, pass, settle), and each way of generating is a mode
 * (engine/modes). Knows nothing of HTTP or Durable Objects; hosts hand it a runtime and a source of model bytes.
 */
export class Engine {
  readonly kv: KvCacheManager;
  /** The blocks' bytes, where the runner keeps them (the manager only plans what moves there). */
  readonly kvMemory: KvMemory;
  readonly modelId: string;
  readonly config: ModelConfig;
  readonly tokenizer: TextTokenizer;
  readonly runner: ModelRunner;
  /** Structured outputs: grammars compiled for this tokenizer, cached by spec. */
  readonly constraints: ConstraintCompiler;
  private readonly chatTemplate: { template: string | undefined; config: Record<string, unknown> };
  /** How the model pools an embeddings request's hidden states. */
  readonly pooling: Pooling;
  private readonly scheduler: Scheduler<Sequence>;
  private readonly batch: Batch;
  private readonly pipeline: StepPipeline;
  private readonly sessions: SessionCaches;
  private readonly persistence: BlockPersistence | undefined;
  private readonly restorer: BlockRestorer | undefined;
  private readonly speculator: Speculator;
  private readonly maxBatchSize: number;
  /** The step loops, one per lane (step-loop.ts). */
  private readonly loop: StepLoop;
  private readonly kvBytesPerToken: number;
  private readonly stepHistory = new StepHistory();
  private readonly counters = newStepCounters();
  /** The model's LoRA adapters (shared with the isolate's other engines of this model). */
  readonly adapters: AdapterCache;

  private constructor(
    parts: EngineParts,
    readonly backend: string,
    private readonly options: EngineOptions,
    grammarWasm?: WebAssembly.Module,
  ) {
    const { model, runner, limits, speculator, cacheIdentity } = parts;
    this.modelId = options.modelId ?? 'default';
    this.config = model.config;
    this.tokenizer = model.tokenizer;
    this.chatTemplate = model.chat;
    this.pooling = model.pooling;
    this.runner = runner;
    this.adapters = model.adapters;
    this.speculator = speculator;
    const { config, tokenizer } = this;
    this.constraints = new ConstraintCompiler(
      grammarWasm,
      tokenizer,
      Math.min(config.vocabSize, tokenizer.vocabSize),
      config.eosTokenIds,
      options.anyJsonWhitespace,
    );
    this.maxBatchSize = limits.maxBatchSize;
    const lanes = Math.max(1, runner.passesInFlight ?? 1);
    const { blockSize } = limits;
    const kvDtype = options.kvDtype ?? 'fp32';
    this.kvBytesPerToken = kvBytesPerToken(config, kvDtype);
    const numBlocks = kvPoolBlocks(config, limits.kvCacheBytes, blockSize, kvDtype);
    if (numBlocks < 1) throw new RangeError('kvCacheBytes is too small for one KV block');
    const memory = runner.createKvMemory(config, numBlocks, blockSize, kvDtype);
    this.kvMemory = memory;
    this.kv = new KvCacheManager(new BlockPool(config, numBlocks, blockSize), cacheIdentity);
    if (options.kvStore) {
      options.kvStore.open(cacheIdentity, blockSize);
      this.restorer = new BlockRestorer(options.kvStore, memory.blockBytes);
      this.kv.restoreFrom(this.restorer);
      this.persistence = new BlockPersistence(this.kv.pool, memory, options.kvStore);
    }
    this.sessions = new SessionCaches(this.kv);
    this.scheduler = new Scheduler(
      this.kv,
      { maxBatchSize: limits.maxBatchSize, maxTokensPerStep: limits.maxTokensPerStep, lanes },
      () => this.sessions.releaseOldest(),
      (seq) => (seq.session === undefined ? undefined : this.sessions.take(seq.session, seq.tokens, seq.kv.root)),
      {
        lookahead: (seq) => seq.group.mode.lookahead(seq),
        cohort: (seq) => seq.group.mode.cohort(seq),
        // Both read every prompt position's pass output, which a cached block would skip.
        skipsPrefixCache: (seq) =>
          seq.output.promptLogprobs !== undefined || seq.output.request.embedding !== undefined,
      },
    );
    this.batch = new Batch(this.kv, this.scheduler, this.sessions, this.persistence, this.counters);
    this.loop = new StepLoop(this.loopHost(), lanes);
    this.pipeline = new StepPipeline({
      scheduler: this.scheduler,
      kv: this.kv,
      memory,
      runner,
      batch: this.batch,
      speculator,
      counters: this.counters,
      history: this.stepHistory,
      samplableVocab: this.samplableVocab,
      lanes,
      forgetCached: () => {
        this.persistence?.dropAll();
        while (this.sessions.releaseOldest());
      },
      settledPass: () => this.loop.wake(),
    });
  }

  static async load(runtime: EngineRuntime, source: ModelSource, options: EngineOptions = {}): Promise<Engine> {
    const parts = await loadEngineParts(runtime, source, options);
    const engine = new Engine(parts, runtime.name, options, runtime.grammar);
    parts.hold(engine);
    return engine;
  }

  /**
   * LoRA adapter `name` of this model (its folder's adapters/<name>/), loaded now or held already, for
   * GenerateOptions.adapter. Refused (InvalidRequestError, param `model`) when it is missing (`model_not_found`),
   * bad (`invalid_adapter`, naming the file and why) or the runner cannot run adapters (`unsupported_model`).
   */
  loadAdapter(name: string): Promise<LoraAdapter> {
    if (!this.runner.rowAdapters)
      return Promise.reject(
        new InvalidRequestError(
          'model',
          `'${name}' is a LoRA adapter, and adapters run on the kernels (whole or on pipeline stages), the WGSL pass, and GPU hosts running either with the adapter in their folder; this model runs on ${this.runner.stats().host ? `a GPU host (${this.runner.name}) that does not run them` : this.runner.name}`,
          'unsupported_model',
        ),
      );
    return this.adapters.load(name).then(async (adapter) => {
      // Its name and identity only: what crosses to a host or a stage (the arrays stay here).
      await this.runner.prepareAdapter?.({ name: adapter.name, identity: adapter.identity });
      return adapter;
    });
  }

  /** Token ids the model can be asked to generate: those both the model and the tokenizer know. */
  get samplableVocab(): number {
    return Math.min(this.config.vocabSize, this.tokenizer.vocabSize);
  }

  /** The chat template, or the refusal a base model without one gives a chat request (its prompts still serve). */
  private requireChatTemplate(): string {
    const { template } = this.chatTemplate;
    if (template !== undefined) return template;
    throw new InvalidRequestError(
      'messages',
      `${this.modelId} has no chat template (its tokenizer_config.json has no chat_template): send a prompt to /v1/completions instead, or give one with CHAT_TEMPLATE`,
      'chat_template_missing',
    );
  }

  /** Tokenises the prompt and checks every parameter; throws InvalidRequestError before any compute. */
  resolve(request: GenerationRequest): ResolvedRequest {
    const resolved = this.resolveFields(request);
    if (resolved.promptLogprobs !== undefined && this.runner.noPromptLogprobs)
      throw new InvalidRequestError('prompt_logprobs', this.runner.noPromptLogprobs);
    if (resolved.embedding && !this.runner.givesHiddenStates)
      throw new InvalidRequestError(
        'input',
        `embeddings need the final hidden states, which the ${this.runner.name} runner does not give: serve the model on the kernels`,
        'unsupported_model',
      );
    return resolved;
  }

  private resolveFields(request: GenerationRequest): ResolvedRequest {
    return resolveRequest(request, {
      encode: (text) => this.tokenizer.encode(text),
      encodePrompt: (text) => this.tokenizer.encodePrompt(text),
      renderChat: (messages, tools, variables) =>
        renderChat(this.requireChatTemplate(), messages, this.chatTemplate.config, { tools, variables }),
      encodeChat: (messages, tools, variables) => {
        const template = this.requireChatTemplate();
        return encodeChat(this.tokenizer, messages, (m) =>
          renderChat(template, m, this.chatTemplate.config, { tools, variables }),
        );
      },
      compileConstraint: (constraint) => this.constraints.compile(constraint),
      vocabSize: this.config.vocabSize,
      samplableVocab: this.samplableVocab,
      contextWindow: this.config.maxPositionEmbeddings,
      maxPromptChars: this.config.maxPositionEmbeddings * this.tokenizer.longestTokenBytes,
      eosTokenIds: this.config.eosTokenIds,
      maxN: this.maxBatchSize,
      kv: { blocksFor: (tokens) => this.kv.blocksFor(tokens), total: this.kv.pool.numBlocks },
      hasDraftModel: this.speculator.hasDraftModel,
      defaultSpeculative: this.options.speculative,
      pooling: this.pooling,
      hiddenSize: this.config.hiddenSize,
    });
  }

  /**
   * Queues a request and returns its event stream: a `token` event per generated token, then one `done`.
   * Invalid requests throw InvalidRequestError here, synchronously, before anything is queued.
   * Leaving the stream early (break, return) cancels the request and frees its cache blocks.
   */
  generate(request: GenerationRequest, options: GenerateOptions = {}): AsyncGenerator<GenerationEvent> {
    const resolved = this.resolve(request);
    if (options.session !== undefined && resolved.n > 1)
      throw new InvalidRequestError('n', 'a session turn generates one reply; n must be 1');
    if (options.session !== undefined && resolved.beam)
      throw new InvalidRequestError('use_beam_search', 'a session turn cannot use beam search');
    // The group and its mode name each other (a beam search ends its group): the mode is set once the sequences are made.
    const group = { events: new EventQueue(), cancelRequested: false, expectedDone: resolved.n } as RequestGroup;
    const onDevice = this.runner.deviceSampling !== undefined && drawsOnDevice(resolved);
    const sequences = Array.from({ length: startingSequences(resolved) }, (_, index): Sequence => {
      const seed = resolved.sampling.seed;
      const own =
        index === 0 || seed === undefined
          ? resolved
          : { ...resolved, sampling: { ...resolved.sampling, seed: seed + index } };
      return {
        id: this.batch.newId(),
        tokens: [...resolved.promptIds],
        kv: this.kv.create(options.cacheSalt, options.adapter),
        output: new SequenceOutput(own, this.tokenizer, this.samplableVocab, index, onDevice),
        group,
        admitted: false,
        session: options.session,
        fairnessGroup: options.fairnessGroup,
      };
    });
    group.mode = createMode(resolved, group, sequences, this.batch, this.speculator);
    const cancel = (): void => {
      group.cancelRequested = true;
      this.kick();
    };
    if (options.signal?.aborted) group.cancelRequested = true;
    options.signal?.addEventListener('abort', cancel, { once: true });
    for (const seq of sequences) this.batch.active.add(seq);
    this.scheduler.add(sequences[0]);
    this.kick();
    return streamGroup(group, cancel);
  }

  /**
   * One engine step (step-pipeline.ts): retire cancelled requests, schedule, propose, run one batched pass,
   * sample and stream. With lanes (a runner that takes several passes at once), `lane`'s sequences only;
   * returns whether a pass ran.
   */
  step(lane?: number): Promise<boolean> {
    return this.pipeline.step(lane);
  }

  /** Tokens a session's kept cache holds now (0 once released for room, or never kept). */
  sessionCachedTokens(session: string): number {
    return this.sessions.cachedTokens(session);
  }

  /** Frees a session's cache between turns (session deleted); blocks queued for the store are no longer pinned to it. */
  releaseSession(session: string): void {
    this.sessions.release(session);
    this.persistence?.forget(session);
  }

  /**
   * Forgets every prefix-cache block no sequence holds, so the pool holds only what running requests and
   * kept sessions hold (memory wanted back; the bench measures a restore as a restarted engine sees it).
   */
  evictPrefixCache(): number {
    return this.kv.pool.evictIdle();
  }

  /**
   * Writes the full blocks of finished sequences to the KV store (a no-op without one). Hosts call it
   * once a generation's last event has been sent, so writing never delays a token; it yields to the
   * event loop as it goes, and concurrent calls share one writer.
   */
  storeKv(): Promise<void> {
    return this.persistence?.flush() ?? Promise.resolve();
  }

  private kick(): void {
    if (this.options.autoRun !== false) this.loop.kick();
  }

  /** The loop's view of the engine (step-loop.ts). */
  private loopHost(): StepLoopHost {
    return {
      step: (lane) => this.pipeline.step(lane),
      hasWork: () => this.scheduler.hasWork || this.batch.hasCancelled,
      inFlight: () => this.pipeline.inFlight.size,
      failAll: (error) => this.batch.failAll(error),
    };
  }

  /**
   * Sequences waiting for a batch slot, by fairness group: a waiting request counts with the siblings
   * (n > 1) that will fork from it, since each will hold a slot. For hosts that share the queue fairly.
   */
  waitingByGroup(): Map<string | undefined, number> {
    const out = new Map<string | undefined, number>();
    for (const seq of this.scheduler.waiting)
      out.set(seq.fairnessGroup, (out.get(seq.fairnessGroup) ?? 0) + seq.group.mode.slots(seq));
    return out;
  }

  /** True while any request is queued or running. */
  get busy(): boolean {
    return this.batch.active.size > 0;
  }

  /**
   * The block pool as it is now: each block's state and references, each sequence's block table (running,
   * waiting, and session caches kept between turns), and the last steps' batch sizes. For pictures and tests.
   */
  poolSnapshot(): PoolSnapshot & { maxBatchSize: number; steps: StepRecord[] } {
    const key = (seq: Sequence): string => seq.session ?? `request-${seq.id}`;
    const sequences: SequenceBlocks[] = [];
    const row = (seq: Sequence, state: SequenceBlocks['state']): void => {
      sequences.push({ key: key(seq), state, tokens: seq.kv.length, blocks: [...seq.kv.blocks] });
    };
    for (const seq of this.scheduler.running) row(seq, 'running');
    for (const seq of this.scheduler.waiting) row(seq, 'waiting');
    for (const { session, kv } of this.sessions.entries())
      sequences.push({ key: session, state: 'kept', tokens: kv.length, blocks: [...kv.blocks] });
    return {
      ...snapshotPool(this.kv.pool, sequences),
      maxBatchSize: this.maxBatchSize,
      steps: this.stepHistory.list(),
    };
  }

  stats(): EngineStats {
    const pool = this.kv.pool;
    const bytesPerToken = this.kvBytesPerToken;
    return {
      kv: {
        ...pool.stats(),
        blockSize: pool.blockSize,
        bytesPerToken,
        bytesTotal: pool.numBlocks * pool.blockSize * bytesPerToken,
      },
      ...this.counters,
      preemptions: this.scheduler.preemptions,
      copyOnWrites: this.kv.copyOnWrites,
      queueDepth: this.scheduler.waiting.length,
      pinnedSessions: this.sessions.size,
      running: this.scheduler.running.length,
      ...this.runner.stats(),
      ...(this.speculator.hasDraftModel ? { draftKv: this.speculator.draftPoolStats() } : {}),
      ...(this.persistence
        ? {
            kvStore: {
              ...this.persistence.store.usage(),
              ...this.persistence.counters,
              restored: { ...this.restorer!.counters },
            },
          }
        : {}),
      grammar: this.constraints.snapshot(),
    };
  }
}

import { BeamGroup } from './beam/beam-group.js';
import { BeamSearch } from './beam/beam-search.js';
import type { EngineStats } from './engine-stats.js';
import { InvalidRequestError, SequenceFailedError } from './errors.js';
import { PassFaults } from './pass-faults.js';
import { EventQueue } from './event-queue.js';
import { StepLoop, type StepLoopHost } from './step-loop.js';
import { BlockPool } from './kv/block-pool.js';
import { KvCacheManager } from './kv/paged-kv.js';
import { BlockPersistence } from './kv/block-persistence.js';
import { KV_FORMAT_VERSION, type KvBlockStore } from './kv/block-store.js';
import { sha256Hex } from './kv/sha256.js';
import { SessionCaches } from './kv/session-caches.js';
import { snapshotPool, type PoolSnapshot, type SequenceBlocks } from './kv/pool-snapshot.js';
import { StepHistory, type StepRecord } from './step-history.js';
import { kvBytesPerToken, kvPoolBlocks, type ModelConfig } from './model/config.js';
import type { ModelDtype, ModelSource } from './model/model-files.js';
import { loadModel, type LoadedModel } from './model-load.js';
import type { RunnerOptions } from './runners/create-runner.js';
import { IsolatePoolPlan, sharedModelKey, type IsolateShare } from './runners/isolate-pool.js';
import type { FootprintPart } from './runners/memory-budget.js';
import {
  KvLostError,
  settled,
  type DeviceSampling,
  type ModelRunner,
  type StepLogits,
  type StepRow,
} from './runners/model-runner.js';
import { resolveEngineLimits, type EngineLimits } from './defaults.js';
import { isKvDtype, KV_DTYPES, type KvDtype } from './kv/kv-dtype.js';
import type { SampledToken } from './sampling/sampler.js';
import type { EngineRuntime } from './model/runtime.js';
import { resolveRequest, type GenerationRequest, type ResolvedRequest } from './request.js';
import { Scheduler } from './scheduler.js';
import { SequenceOutput, type GenerationEvent, type TokenEvent } from './sequence-output.js';
import { loadDraftModel, type DraftModelOptions } from './speculative/load-draft.js';
import type { SpeculativeParams } from './speculative/speculative-params.js';
import { Speculator, type Proposal } from './speculative/speculator.js';
import { settleProposals } from './speculative/verification.js';
import { NO_LOGITS, streamGroup, type Sequence, type RequestGroup, type ScheduledRow } from './sequence.js';
import type { TextTokenizer } from '../tokenizer/tokenizer.js';
import { renderChat } from '../tokenizer/chat-template.js';
import { encodeChat } from '../tokenizer/chat-encoding.js';
import { ConstraintCompiler } from './constraints/compiler.js';

export interface EngineOptions
  extends Partial<EngineLimits>,
    Omit<RunnerOptions, keyof EngineLimits | 'isolateBudget'> {
  /** Which weights: unset, the folder's default (model/default-weights.ts: its only weights, else GGUF, else fp32). */
  dtype?: ModelDtype;
  /** The host's name for `dtype`, for the refusal that lists a folder's weights (`MODEL_DTYPE`, `--dtype`). */
  dtypeOption?: string;
  /** Name the model is served under; also part of every prefix-cache block hash. */
  modelId?: string;
  /** The KV cache's element type: fp32 (default), or fp16 for twice the tokens per byte (edge kernels only). */
  kvDtype?: KvDtype;
  /** A chat template instead of tokenizer_config.json's (CHAT_TEMPLATE): a base model has none of its own. */
  chatTemplate?: string;
  /**
   * JSON constraints (response formats, tool-call arguments) leave whitespace free unless a request says
   * otherwise. Default false: no free whitespace (see constraints/spec.ts).
   */
  anyJsonWhitespace?: boolean;
  /** Run the engine loop by itself whenever there is work (default). Off, the owner calls step(). */
  autoRun?: boolean;
  /** A draft model for speculative decoding (method `draft`): same tokenizer, its own KV pool. */
  draft?: DraftModelOptions;
  /** Speculation for requests that do not ask for any (a server default). */
  speculative?: SpeculativeParams;
  /**
   * Durable storage for full KV blocks: finished sequences' blocks are written there by storeKv(), and
   * a prefix the pool has lost is restored from there instead of prefilled. The weights file is then
   * digested as it loads, since the digest is part of every stored block's name.
   */
  kvStore?: KvBlockStore;
  /**
   * Engines sharing an isolate (Durable Objects of one class): the model is loaded once for all of them,
   * and each gets a KV pool sized so that `isolate.engines` of them fit the memory budget together.
   */
  isolate?: IsolateShare;
}

/** What a model pass gives the step: logits, and the tokens drawn on the device where the runner draws them. */
interface PassOutput {
  logits: StepLogits;
  drawn: Map<Sequence, SampledToken>;
}

export interface GenerateOptions {
  /** Aborting ends the generation at the next step boundary with finish reason `cancelled`. */
  signal?: AbortSignal;
  /**
   * Keeps the request's KV cache after it finishes, under this key. The next request with the same key
   * whose tokens extend these continues from that cache and prefills only what is new (chat turns).
   * Idle session caches are released, oldest first, whenever the pool needs room.
   */
  session?: string;
  /**
   * Whose request this is: waiting requests are admitted round-robin across groups, first come first
   * served within one (the host decides what a group is, e.g. one per client). Default: one shared group.
   */
  fairnessGroup?: string;
  /** Salts its KV blocks' hashes (vLLM's cache_salt): it shares cached prefixes only with requests of the same salt. */
  cacheSalt?: string;
}

/**
 * A loaded model serving many requests at once: tokenizer and chat template, the ONNX runner, a paged
 * KV cache and a continuous-batching scheduler. Each step admits waiting requests, runs one batched
 * pass over every running sequence, samples, streams, and retires what finished.
 * Knows nothing of HTTP or Durable Objects; hosts hand it a runtime and a source of model bytes.
 */
export class Engine {
  readonly kv: KvCacheManager;
  private readonly scheduler: Scheduler<Sequence>;
  private readonly active = new Set<Sequence>();
  private readonly sessions: SessionCaches;
  private readonly persistence: BlockPersistence | undefined;
  private nextId = 1;
  private readonly maxBatchSize: number;
  /** Passes in flight at once (runner.passesInFlight): each lane runs its own sequences' steps. */
  private readonly lanes: number;
  /** Sequences whose pass is in flight: nothing else touches their blocks until it settles. */
  private readonly inFlight = new Set<Sequence>();
  /** Bumped when the runner's KV memory is lost: a pass launched before settles as nothing. */
  private kvEpoch = 0;
  /** The step loops, one per lane (step-loop.ts). */
  private readonly loop: StepLoop;
  /** Proposals of one lane at a time: a draft model's runner takes one pass at a time. */
  private proposing: Promise<unknown> = Promise.resolve();
  private readonly kvBytesPerToken: number;
  private readonly stepHistory = new StepHistory();
  /** Structured outputs: grammars compiled for this tokenizer, cached by spec. */
  readonly constraints: ConstraintCompiler;
  /** A failed pass: its rows rerun alone until the one at fault is found (see pass-faults.ts); one per lane. */
  private readonly faults: PassFaults<Sequence>[];
  private readonly counters = {
    prefixHitTokens: 0,
    prefillTokens: 0,
    generatedTokens: 0,
    steps: 0,
    lastBatchSize: 0,
    lastStepTokens: 0,
    /** Speculative tokens verified, and those that stood. */
    proposedTokens: 0,
    acceptedTokens: 0,
    /** Times the runner's KV memory was lost (a pipeline stage restarted) and every sequence recomputed. */
    kvLosses: 0,
  };

  private constructor(
    readonly modelId: string,
    readonly config: ModelConfig,
    readonly tokenizer: TextTokenizer,
    private readonly chatTemplate: { template: string | undefined; config: Record<string, unknown> },
    readonly runner: ModelRunner,
    readonly backend: string,
    limits: EngineLimits,
    private readonly options: EngineOptions,
    private readonly speculator: Speculator,
    cacheIdentity: string,
    grammarWasm?: WebAssembly.Module,
  ) {
    this.constraints = new ConstraintCompiler(
      grammarWasm,
      tokenizer,
      Math.min(config.vocabSize, tokenizer.vocabSize),
      config.eosTokenIds,
      options.anyJsonWhitespace,
    );
    this.maxBatchSize = limits.maxBatchSize;
    this.lanes = Math.max(1, runner.passesInFlight ?? 1);
    this.loop = new StepLoop(this.loopHost(), this.lanes);
    this.faults = Array.from(
      { length: this.lanes },
      () =>
        new PassFaults<Sequence>({
          rewind: (seq, length) => this.kv.truncate(seq.kv, Math.min(length, seq.kv.length)),
          fail: (seq, err) => this.failRequest(seq.group, err),
        }),
    );
    const { blockSize } = limits;
    const kvDtype = options.kvDtype ?? 'fp32';
    this.kvBytesPerToken = kvBytesPerToken(config, kvDtype);
    const numBlocks = kvPoolBlocks(config, limits.kvCacheBytes, blockSize, kvDtype);
    if (numBlocks < 1) throw new RangeError('kvCacheBytes is too small for one KV block');
    const memory = runner.createKvMemory(config, numBlocks, blockSize, kvDtype);
    this.kv = new KvCacheManager(new BlockPool(config, numBlocks, blockSize), cacheIdentity, memory);
    if (options.kvStore) {
      options.kvStore.open(cacheIdentity, blockSize);
      this.kv.restoreFrom(options.kvStore);
      this.persistence = new BlockPersistence(this.kv.pool, memory, options.kvStore);
    }
    this.sessions = new SessionCaches(this.kv);
    this.scheduler = new Scheduler(
      this.kv,
      { maxBatchSize: limits.maxBatchSize, maxTokensPerStep: limits.maxTokensPerStep, lanes: this.lanes },
      () => this.sessions.releaseOldest(),
      (seq) => (seq.session === undefined ? undefined : this.sessions.take(seq.session, seq.tokens)),
    );
  }

  static async load(runtime: EngineRuntime, source: ModelSource, options: EngineOptions = {}): Promise<Engine> {
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
      return Engine.assemble(runtime, model, await model.takeRunner(limits, options.pipeline?.links), limits, options);
    }
    // An object's earlier instance (the runtime replaced it) holds nothing any more.
    share.models.release(share.holder);
    const key = sharedModelKey(share, runtime, options);
    const plan = new IsolatePoolPlan(
      share,
      key,
      limits,
      kvDtype,
      runtime.name === 'wasm',
      options.pipeline !== undefined,
    );
    const model = await share.models.model(key, async () =>
      plan.withIsolatePart(await loadModel(runtime, source, { ...loadOptions, isolateBudget: plan.budget }, limits)),
    );
    const runner = await model.takeRunner(limits, options.pipeline?.links);
    let pool: { kvCacheBytes: number; parts: FootprintPart[] };
    try {
      pool = plan.pool(model);
    } catch (err) {
      await runner.release();
      throw err;
    }
    const engine = await Engine.assemble(
      runtime,
      model,
      runner,
      { ...limits, kvCacheBytes: pool.kvCacheBytes },
      options,
    );
    share.models.hold(share.holder, key, pool.parts, () => void runner.release(), engine);
    return engine;
  }

  /** An engine over a loaded model and a runner of its own: its KV pool, its draft model, its cache identity. */
  private static async assemble(
    runtime: EngineRuntime,
    model: LoadedModel,
    runner: ModelRunner,
    limits: EngineLimits,
    options: EngineOptions,
  ): Promise<Engine> {
    const kvDtype = options.kvDtype ?? 'fp32';
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
      kvDtype,
      limits.blockSize,
      runner.kvIdentity,
      runtime.name,
    ].join('\u0000');
    const cacheIdentity = `${modelId}:${sha256Hex(new TextEncoder().encode(identity))}`;
    return new Engine(
      modelId,
      model.config,
      model.tokenizer,
      model.chat,
      runner,
      runtime.name,
      limits,
      options,
      new Speculator(draft),
      cacheIdentity,
      runtime.grammar,
    );
  }

  /** On WebGPU, tokens are drawn by our kernels where the logits are (see runPass). */
  private get samplesOnDevice(): boolean {
    return this.runner.deviceSampling !== undefined;
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
    return resolved;
  }

  private resolveFields(request: GenerationRequest): ResolvedRequest {
    return resolveRequest(request, {
      encode: (text) => this.tokenizer.encode(text),
      encodePrompt: (text) => this.tokenizer.encodePrompt(text),
      renderChat: (messages, tools) =>
        renderChat(this.requireChatTemplate(), messages, this.chatTemplate.config, { tools }),
      encodeChat: (messages, tools) => {
        const template = this.requireChatTemplate();
        return encodeChat(this.tokenizer, messages, (m) =>
          renderChat(template, m, this.chatTemplate.config, { tools }),
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
    const group: RequestGroup = { events: new EventQueue(), cancelRequested: false, expectedDone: resolved.n };
    // Beam search starts from one sequence and forks it into beams as the search goes.
    const sequences = Array.from({ length: resolved.beam ? 1 : resolved.n }, (_, index): Sequence => {
      const seed = resolved.sampling.seed;
      const own =
        index === 0 || seed === undefined
          ? resolved
          : { ...resolved, sampling: { ...resolved.sampling, seed: seed + index } };
      return {
        id: this.nextId++,
        tokens: [...resolved.promptIds],
        kv: this.kv.create(options.cacheSalt),
        output: new SequenceOutput(
          own,
          this.tokenizer,
          this.samplableVocab,
          index,
          this.samplesOnDevice && !resolved.speculative && !resolved.beam,
        ),
        group,
        forks: [],
        admitted: false,
        session: options.session,
        fairnessGroup: options.fairnessGroup,
        lookahead: 0,
        cohort: resolved.beam ? group : undefined,
        skipsPrefixCache: resolved.promptLogprobs !== undefined,
      };
    });
    const [first, ...forks] = sequences;
    first.forks = forks;
    if (resolved.beam) {
      const search = new BeamSearch(resolved.beam, resolved.maxTokens, resolved.stopTokenIds);
      group.beams = new BeamGroup(
        first,
        resolved.promptIds.length,
        search,
        resolved.sampling,
        { fork: (parent) => this.forkBeam(parent), drop: (beam) => this.dropSequence(beam) },
        resolved.constraint?.matcher([...resolved.stopTokenIds]),
      );
    }
    const cancel = (): void => {
      group.cancelRequested = true;
      this.kick();
    };
    if (options.signal?.aborted) group.cancelRequested = true;
    options.signal?.addEventListener('abort', cancel, { once: true });
    for (const seq of sequences) this.active.add(seq);
    this.scheduler.add(first);
    this.kick();
    return streamGroup(group, cancel);
  }

  /**
   * One engine step: retire cancelled requests, schedule, propose, run one batched pass, sample and stream.
   * With lanes (a runner that takes several passes at once), `lane`'s sequences only; returns whether a pass ran.
   */
  async step(lane?: number): Promise<boolean> {
    for (const seq of this.active) {
      if (!seq.group.cancelRequested || this.inFlight.has(seq)) continue;
      if (seq.group.beams) this.endBeamSearch(seq.group, seq.output, true);
      else if (!seq.output.finished) {
        seq.output.cancel();
        this.retire(seq);
      }
    }
    const plan = this.scheduler.schedule(this.lanes === 1 ? undefined : lane);
    for (const { seq, cachedTokens } of plan.admitted) {
      this.counters.prefixHitTokens += cachedTokens;
      if (!seq.admitted) seq.output.cachedTokens = cachedTokens;
      seq.admitted = true;
    }
    const faults = this.faults[lane ?? 0];
    plan.rows = faults.rowsToRun(plan.rows);
    if (plan.rows.length === 0) return false;

    for (const { seq } of plan.rows) this.inFlight.add(seq);
    const kvEpoch = this.kvEpoch;
    try {
      const proposals = await this.proposeInTurn(plan.rows);
      const starts = plan.rows.map((r) => r.seq.kv.length);
      const fed = plan.rows.map((r) => r.tokens.length);
      for (const [i, row] of plan.rows.entries()) row.tokens.push(...(proposals[i]?.tokens ?? []));
      // The logits are read in the turn the pass returns them: a synchronous runner's lie in scratch that the
      // next pass reuses, and that may be another engine's of the same isolate.
      let pass: PassOutput | Promise<PassOutput>;
      try {
        pass = this.runPass(plan.rows, proposals);
        if (pass instanceof Promise) pass = await pass;
      } catch (err) {
        if (kvEpoch !== this.kvEpoch) return this.lostInFlight(plan.rows);
        if (err instanceof KvLostError) {
          for (const { seq } of plan.rows) this.inFlight.delete(seq);
          this.kvLost(err);
          if (err.fatal) for (const { seq } of plan.rows) if (this.active.has(seq)) this.failRequest(seq.group, err);
        } else faults.passFailed(plan.rows, starts, err);
        return true;
      }
      if (kvEpoch !== this.kvEpoch) return this.lostInFlight(plan.rows);
      this.afterPass(plan.rows, proposals, starts, fed, pass);
      return true;
    } finally {
      for (const { seq } of plan.rows) this.inFlight.delete(seq);
      this.loop.wake();
    }
  }

  /**
   * A pass that was in flight when the KV memory was lost (another lane found it): whatever it computed is
   * dropped, and its sequences, which the loss left running for it, are recomputed too.
   */
  private lostInFlight(rows: readonly ScheduledRow[]): true {
    for (const { seq } of rows) this.inFlight.delete(seq);
    this.scheduler.preemptAll(
      (seq) => this.inFlight.has(seq),
      rows.map((r) => r.seq),
    );
    return true;
  }

  /** Proposals for a step's rows, one lane's at a time. */
  private proposeInTurn(rows: readonly ScheduledRow[]): Promise<(Proposal | undefined)[]> {
    const turn = this.proposing.then(() => this.propose(rows));
    this.proposing = turn.catch(() => undefined);
    return turn;
  }

  /**
   * The runner's KV memory lost its contents (a pipeline stage restarted): no cached block can be trusted, so
   * the prefix cache and the sessions' kept caches are forgotten and every running sequence is recomputed
   * from its tokens (a slower next token, nothing else). Stored blocks are still good: they restore.
   */
  private kvLost(err: KvLostError): void {
    console.warn(`${err.message}; recomputing every sequence from its tokens`);
    this.counters.kvLosses++;
    this.kvEpoch++;
    this.persistence?.dropAll();
    while (this.sessions.releaseOldest());
    // Sequences in another lane's pass stay until it settles (lostInFlight): their blocks are in that pass.
    this.scheduler.preemptAll((seq) => this.inFlight.has(seq));
    this.kv.pool.uncacheAll();
  }

  /** Streams what a pass gave: verifies proposals, commits the new tokens to the cache, samples. */
  private afterPass(
    rows: readonly ScheduledRow[],
    proposals: readonly (Proposal | undefined)[],
    starts: readonly number[],
    fed: readonly number[],
    { logits, drawn }: PassOutput,
  ): void {
    this.counters.steps++;
    this.counters.lastBatchSize = rows.length;
    this.counters.lastStepTokens = rows.reduce((n, r) => n + r.tokens.length, 0);
    this.stepHistory.push({ step: this.counters.steps, batch: rows.length, tokens: this.counters.lastStepTokens });

    for (const [i, { seq, samples }] of rows.entries()) {
      // Gone during this loop: a beam the search dropped when a sibling's logits completed its step.
      if (!this.active.has(seq)) continue;
      try {
        this.settleRow(seq, samples, i, starts[i], fed[i], proposals[i], logits, drawn);
      } catch (err) {
        this.failRequest(seq.group, err);
      }
    }
  }

  /**
   * Row `i` of the pass, after it: prompt logprobs, speculation, the prefix cache, then the row's token
   * (and its forks'). `start` is where its cache stood before the pass, `fed` the tokens the pass took.
   */
  private settleRow(
    seq: Sequence,
    samples: boolean,
    i: number,
    start: number,
    fed: number,
    proposal: Proposal | undefined,
    logits: StepLogits,
    drawn: Map<Sequence, SampledToken>,
  ): void {
    const decode = samples && fed === 1 && start >= seq.output.request.promptIds.length;
    if (!decode) this.counters.prefillTokens += fed;
    seq.output.promptLogprobs?.record(start, fed, (j) => logits.at(i, j));
    if (proposal) {
      this.verify(seq, proposal, (j) => logits.at(i, fed - 1 + j), start + fed);
      return;
    }
    this.kv.commit(seq.kv, seq.tokens);
    if (!samples || seq.output.finished) return;
    // A beam the search continued earlier in this loop has a token this pass did not compute.
    if (seq.group.beams) {
      if (seq.kv.length === seq.tokens.length) this.onBeamLogits(seq, logits.last(i));
      return;
    }
    // The prompt is prefilled: siblings fork its cache now and sample from the same logits.
    const forks = seq.forks.splice(0).map((child) => this.startFork(seq, child));
    for (const sibling of [seq, ...forks]) this.sample(sibling, drawn.get(sibling) ?? logits.last(i));
  }

  /** Proposals for the rows the scheduler gave room to speculate (undefined for the others). */
  private async propose(rows: readonly { seq: Sequence; lookahead: number }[]): Promise<(Proposal | undefined)[]> {
    const speculating = rows.flatMap((row, i) => (row.lookahead > 0 && row.seq.output.request.speculative ? [i] : []));
    const out: (Proposal | undefined)[] = rows.map(() => undefined);
    if (speculating.length === 0) return out;
    const proposals = await this.speculator.propose(
      speculating.map((i) => {
        const { seq, lookahead } = rows[i];
        const { speculative, sampling } = seq.output.request;
        return {
          id: seq.id,
          tokens: seq.tokens,
          count: lookahead,
          params: speculative!,
          sampling,
          seed: seq.output.seed,
        };
      }),
    );
    for (const [k, i] of speculating.entries()) out[i] = proposals[k];
    return out;
  }

  /**
   * Settles a row's proposals against the target's logits (`at(j)`: after the row's last settled token
   * and j proposals), streams the tokens that stand plus the one the target gives after them, and drops
   * the rejected positions from the cache.
   */
  private verify(seq: Sequence, proposal: Proposal, at: (j: number) => Float32Array, settledLength: number): void {
    const { events, accepted, verified } = settleProposals(seq.output, proposal, at);
    for (const event of events) this.emitToken(seq, event);
    this.counters.proposedTokens += verified;
    this.counters.acceptedTokens += accepted;
    this.kv.truncate(seq.kv, settledLength + accepted);
    this.kv.commit(seq.kv, seq.tokens);
    if (seq.output.finished) this.retire(seq);
  }

  /**
   * The model pass. On a runner that keeps logits on the device, sequences that sample there (all but
   * speculating and beam ones) get their tokens drawn by our kernels, one dispatch for the step, and the
   * logits come back to the CPU only when some row needs them.
   */
  private runPass(
    rows: readonly ScheduledRow[],
    proposals: readonly (Proposal | undefined)[],
  ): PassOutput | Promise<PassOutput> {
    const passRows = rows.map((r, i) => ({
      kv: r.seq.kv,
      tokens: r.tokens,
      logits: 1 + (proposals[i]?.tokens.length ?? 0),
    }));
    const drawn = new Map<Sequence, SampledToken>();
    const device = this.runner.deviceSampling;
    if (!device) return settled(this.runner.forward(passRows), (logits) => ({ logits, drawn }));
    return this.runOnDevice(device, rows, proposals, passRows);
  }

  private async runOnDevice(
    device: DeviceSampling,
    rows: readonly ScheduledRow[],
    proposals: readonly (Proposal | undefined)[],
    passRows: StepRow[],
  ): Promise<PassOutput> {
    const drawn = new Map<Sequence, SampledToken>();
    const sampling = rows.map((r, i) => r.samples && !r.seq.output.finished && proposals[i] === undefined);
    // A row and the forks that will branch from it (n > 1) each draw from the row's logits.
    const draws = rows.flatMap((r, i) =>
      (sampling[i] ? [r.seq, ...r.seq.forks] : [])
        .filter((seq) => seq.output.deviceSampler)
        .map((seq) => ({ row: i, seq })),
    );
    const needLogits = rows.some(
      (r, i) =>
        ((sampling[i] || proposals[i]) && (r.seq.group.beams || !r.seq.output.deviceSampler || proposals[i])) ||
        (r.seq.output.promptLogprobs && r.seq.kv.length + 1 < r.seq.output.request.promptIds.length),
    );
    const out = await device.forwardAndSample(
      passRows,
      draws.map(({ row, seq }) => ({
        row,
        state: seq.output.deviceSampler!,
        grammarMask: seq.output.grammarMask(),
      })),
      this.samplableVocab,
      needLogits,
    );
    for (const [k, { seq }] of draws.entries()) drawn.set(seq, out.sampled[k]);
    return { logits: out.logits ?? NO_LOGITS, drawn };
  }

  private sample(seq: Sequence, from: Float32Array | SampledToken): void {
    this.emitToken(seq, from instanceof Float32Array ? seq.output.onLogits(from) : seq.output.onSampled(from));
    if (seq.output.finished) this.retire(seq);
  }

  private emitToken(seq: Sequence, event: TokenEvent): void {
    this.counters.generatedTokens++;
    seq.tokens.push(event.tokenId);
    seq.group.events.push(event);
    const speculative = seq.output.request.speculative;
    // Proposals past max_tokens would be verified for nothing; one token always comes from the pass itself.
    if (speculative)
      seq.lookahead = Math.max(
        0,
        Math.min(speculative.numTokens, seq.output.request.maxTokens - seq.output.outputIds.length - 1),
      );
  }

  private onBeamLogits(beam: Sequence, logits: Float32Array): void {
    const group = beam.group;
    if (group.beams!.onLogits(beam, logits)) this.endBeamSearch(group, beam.output, false);
  }

  /** Emits the best candidates (or, cancelled, one cancelled completion) and drops every live beam. */
  private endBeamSearch(group: RequestGroup, sequence: SequenceOutput, cancelled: boolean): void {
    const beams = group.beams!;
    beams.abandon();
    if (cancelled) {
      sequence.cancel();
      group.expectedDone = 1;
      group.events.push(sequence.done());
      return;
    }
    const best = beams.best(sequence.request.n);
    group.expectedDone = best.length;
    best.forEach((h, index) => {
      this.counters.generatedTokens += h.tokens.length;
      group.events.push(
        sequence.doneWith(h.tokens, h.finishReason, { score: h.score, cumulativeLogprob: h.cumulativeLogprob }, index),
      );
    });
  }

  /**
   * A new beam sharing `parent`'s cache copy-on-write (and its SequenceOutput, which beams use only for the
   * request and the clock), running beside it, or queued behind it if `parent` was preempted.
   */
  private forkBeam(parent: Sequence): Sequence {
    const child: Sequence = {
      ...parent,
      id: this.nextId++,
      kv: this.kv.fork(parent.kv),
      tokens: [...parent.tokens],
      forks: [],
    };
    this.active.add(child);
    if (this.scheduler.running.includes(parent)) this.scheduler.adopt(child);
    else this.scheduler.addBehind(child, parent);
    return child;
  }

  private dropSequence(seq: Sequence): void {
    this.scheduler.remove(seq);
    this.speculator.release(seq.id);
    this.active.delete(seq);
  }

  /** A sibling takes a copy-on-write share of every block of `parent` and runs from here on its own. */
  private startFork(parent: Sequence, child: Sequence): Sequence {
    child.kv = this.kv.fork(parent.kv);
    child.tokens = [...parent.tokens];
    child.admitted = true;
    child.output.cachedTokens = parent.output.cachedTokens;
    child.output.promptLogprobs = parent.output.promptLogprobs;
    this.scheduler.adopt(child);
    return child;
  }

  /** Takes a finished (or cancelled) request out of the batch at once, freeing its blocks or pinning them for its session. */
  private retire(seq: Sequence): void {
    const chain = [...seq.kv.hashes];
    // A cancel that arrived during the last pass (a session being deleted) keeps nothing either.
    const kept = seq.session !== undefined && seq.output.finishReason !== 'cancelled' && !seq.group.cancelRequested;
    if (kept) {
      this.scheduler.detach(seq);
      this.sessions.keep(seq.session!, seq.kv, seq.tokens);
    } else {
      this.scheduler.remove(seq);
    }
    // A session turn that did not finish leaves the session as it was, in storage too (it may be being deleted).
    // A finished turn's partial last block is stored too: its next turn, restored, then prefills nothing of it.
    if (seq.session === undefined || kept)
      this.persistence?.enqueue(
        chain,
        seq.session,
        kept,
        kept ? this.kv.tailOf(seq.kv, seq.tokens, seq.session!) : undefined,
      );
    this.speculator.release(seq.id);
    this.active.delete(seq);
    seq.group.events.push(seq.output.done());
    // Siblings that never forked (cancelled before the prompt was prefilled) end with it.
    for (const child of seq.forks.splice(0)) {
      child.output.cancel();
      this.retire(child);
    }
  }

  /**
   * Ends one request with an error, and only it: every sequence of its group (its n siblings, its beams)
   * leaves the batch and frees its blocks, keeping nothing for a session; the error is the last event of
   * its stream. Everything else in the batch goes on.
   */
  private failRequest(group: RequestGroup, err: unknown): void {
    const error =
      err instanceof SequenceFailedError
        ? err
        : new SequenceFailedError(
            `the generation failed: ${err instanceof Error ? err.message : String(err)}`,
            'generation_failed',
            { cause: err },
          );
    group.beams?.abandon();
    for (const seq of [...this.active]) {
      if (seq.group !== group) continue;
      seq.output.cancel();
      this.scheduler.remove(seq);
      this.speculator.release(seq.id);
      this.active.delete(seq);
    }
    group.cancelRequested = true;
    group.events.push(error);
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
      step: (lane) => this.step(lane),
      hasWork: () => this.scheduler.hasWork || [...this.active].some((r) => r.group.cancelRequested),
      inFlight: () => this.inFlight.size,
      failAll: (error) => {
        for (const seq of this.active) {
          this.scheduler.remove(seq);
          this.speculator.release(seq.id);
          seq.group.events.push(error);
        }
        this.active.clear();
      },
    };
  }

  /**
   * Sequences waiting for a batch slot, by fairness group: a waiting request counts with the siblings
   * (n > 1) that will fork from it, since each will hold a slot. For hosts that share the queue fairly.
   */
  waitingByGroup(): Map<string | undefined, number> {
    const out = new Map<string | undefined, number>();
    for (const seq of this.scheduler.waiting)
      out.set(seq.fairnessGroup, (out.get(seq.fairnessGroup) ?? 0) + 1 + seq.forks.length);
    return out;
  }

  /** True while any request is queued or running. */
  get busy(): boolean {
    return this.active.size > 0;
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
              restored: { ...this.kv.restored },
            },
          }
        : {}),
      grammar: this.constraints.snapshot(),
    };
  }
}

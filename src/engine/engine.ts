import type { EngineStats } from './engine-stats.js';
import { InvalidRequestError } from './errors.js';
import { EventQueue } from './event-queue.js';
import { BlockPool } from './kv/block-pool.js';
import { KvCacheManager, type PagedSequenceKv } from './kv/paged-kv.js';
import { kvBytesPerToken, type ModelConfig } from './model/config.js';
import { loadModelFiles, type ModelDtype, type ModelSource } from './model/model-files.js';
import { ModelRunner, type RunnerOptions } from './model/runner.js';
import type { OrtRuntime } from './model/runtime.js';
import { resolveRequest, type GenerationRequest, type ResolvedRequest } from './request.js';
import { Scheduler, type SchedulableSequence } from './scheduler.js';
import { Sequence, type GenerationEvent } from './sequence.js';
import { TextTokenizer } from '../tokenizer/tokenizer.js';
import { renderChat } from '../tokenizer/chat-template.js';

export interface EngineOptions extends RunnerOptions {
  dtype?: ModelDtype;
  /** Name the model is served under; also part of every prefix-cache block hash. */
  modelId?: string;
  /** Bytes of KV cache; the block pool gets as many blocks as fit. Default 64 MiB. */
  kvCacheBytes?: number;
  /** Tokens per KV block. Default 16. */
  blockSize?: number;
  /** Sequences in one model pass. Default 32. */
  maxBatchSize?: number;
  /** Tokens computed in one pass (decodes + prefill chunks). Default 512. */
  maxTokensPerStep?: number;
  /** Run the engine loop by itself whenever there is work (default). Off, the owner calls step(). */
  autoRun?: boolean;
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
}

/** A finished session turn's cache: the blocks of `tokens`, kept for the session's next turn. */
interface PinnedCache {
  kv: PagedSequenceKv;
  tokens: number[];
}

/** The n sequences of one request (OpenAI's `n`), which share one event stream. */
interface RequestGroup {
  events: EventQueue<GenerationEvent | Error>;
  cancelRequested: boolean;
}

/** A sequence inside the engine: what the scheduler sees, plus its lifecycle. */
interface EngineRequest extends SchedulableSequence {
  tokens: number[];
  kv: PagedSequenceKv;
  sequence: Sequence;
  group: RequestGroup;
  /** Siblings (n > 1) that fork from this sequence's cache once its prompt is prefilled. */
  forks: EngineRequest[];
  admitted: boolean;
  session: string | undefined;
}

const yieldToEventLoop = (): Promise<void> =>
  new Promise((resolve) => (typeof setImmediate === 'function' ? setImmediate(resolve) : setTimeout(resolve, 0)));

/**
 * A loaded model serving many requests at once: tokenizer and chat template, the ONNX runner, a paged
 * KV cache and a continuous-batching scheduler. Each step admits waiting requests, runs one batched
 * pass over every running sequence, samples, streams, and retires what finished.
 * Knows nothing of HTTP or Durable Objects; hosts hand it a runtime and a source of model bytes.
 */
export class Engine {
  readonly kv: KvCacheManager;
  private readonly scheduler: Scheduler<EngineRequest>;
  private readonly active = new Set<EngineRequest>();
  /** Session caches between turns, least recently used first. */
  private readonly pinned = new Map<string, PinnedCache>();
  private nextId = 1;
  private readonly maxBatchSize: number;
  private looping = false;
  private readonly counters = { prefixHitTokens: 0, prefillTokens: 0, generatedTokens: 0, steps: 0, lastBatchSize: 0, lastStepTokens: 0 };

  private constructor(
    readonly modelId: string,
    readonly config: ModelConfig,
    readonly tokenizer: TextTokenizer,
    private readonly chatTemplate: { template: string; config: Record<string, unknown> },
    readonly runner: ModelRunner,
    readonly backend: string,
    private readonly options: EngineOptions,
  ) {
    this.maxBatchSize = options.maxBatchSize ?? 32;
    const blockSize = options.blockSize ?? 16;
    const numBlocks = Math.floor((options.kvCacheBytes ?? 64 * 2 ** 20) / (blockSize * kvBytesPerToken(config)));
    if (numBlocks < 1) throw new RangeError('kvCacheBytes is too small for one KV block');
    this.kv = new KvCacheManager(new BlockPool(config, numBlocks, blockSize), modelId);
    const limits = { maxBatchSize: this.maxBatchSize, maxTokensPerStep: options.maxTokensPerStep ?? 512 };
    this.scheduler = new Scheduler(
      this.kv,
      limits,
      () => this.releaseOldestSession(),
      (seq) => (seq.session === undefined ? undefined : this.takeSessionCache(seq.session, seq.tokens)),
    );
  }

  static async load(runtime: OrtRuntime, source: ModelSource, options: EngineOptions = {}): Promise<Engine> {
    const files = await loadModelFiles(source, options.dtype ?? 'fp32');
    const tokenizer = TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig);
    const runner = await ModelRunner.create(runtime, files.onnx, files.config, options);
    const template = files.tokenizerConfig.chat_template;
    if (typeof template !== 'string') throw new InvalidRequestError('model', 'tokenizer_config.json has no chat_template');
    const chat = { template, config: files.tokenizerConfig };
    return new Engine(options.modelId ?? 'default', files.config, tokenizer, chat, runner, runtime.name, options);
  }

  /** Token ids the model can be asked to generate: those both the model and the tokenizer know. */
  get samplableVocab(): number {
    return Math.min(this.config.vocabSize, this.tokenizer.vocabSize);
  }

  /** Tokenises the prompt and checks every parameter; throws InvalidRequestError before any compute. */
  resolve(request: GenerationRequest): ResolvedRequest {
    return resolveRequest(request, {
      encode: (text) => this.tokenizer.encode(text),
      renderChat: (messages) => renderChat(this.chatTemplate.template, messages, this.chatTemplate.config),
      vocabSize: this.config.vocabSize,
      samplableVocab: this.samplableVocab,
      contextWindow: this.config.maxPositionEmbeddings,
      eosTokenIds: this.config.eosTokenIds,
      maxN: this.maxBatchSize,
      kv: { blocksFor: (tokens) => this.kv.blocksFor(tokens), total: this.kv.pool.numBlocks },
    });
  }

  /**
   * Queues a request and returns its event stream: a `token` event per generated token, then one `done`.
   * Invalid requests throw InvalidRequestError here, synchronously, before anything is queued.
   * Leaving the stream early (break, return) cancels the request and frees its cache blocks.
   */
  generate(request: GenerationRequest, options: GenerateOptions = {}): AsyncGenerator<GenerationEvent> {
    const resolved = this.resolve(request);
    if (options.session !== undefined && resolved.n > 1) throw new InvalidRequestError('n', 'a session turn generates one reply; n must be 1');
    const group: RequestGroup = { events: new EventQueue(), cancelRequested: false };
    const sequences = Array.from({ length: resolved.n }, (_, index): EngineRequest => {
      const seed = resolved.sampling.seed;
      const own = index === 0 || seed === undefined ? resolved : { ...resolved, sampling: { ...resolved.sampling, seed: seed + index } };
      return {
        id: this.nextId++,
        tokens: [...resolved.promptIds],
        kv: this.kv.create(),
        sequence: new Sequence(own, this.tokenizer, this.samplableVocab, index),
        group,
        forks: [],
        admitted: false,
        session: options.session,
      };
    });
    const [first, ...forks] = sequences;
    first.forks = forks;
    const cancel = (): void => {
      group.cancelRequested = true;
      this.kick();
    };
    if (options.signal?.aborted) group.cancelRequested = true;
    options.signal?.addEventListener('abort', cancel, { once: true });
    for (const seq of sequences) this.active.add(seq);
    this.scheduler.add(first);
    this.kick();
    return this.stream(group, resolved.n, cancel);
  }

  /** The group's events until each of its `n` sequences has sent its done event. */
  private async *stream(group: RequestGroup, n: number, cancel: () => void): AsyncGenerator<GenerationEvent> {
    let open = n;
    try {
      while (open > 0) {
        const event = await group.events.next();
        if (event instanceof Error) throw event;
        if (event.type === 'done') open--;
        yield event;
      }
    } finally {
      if (open > 0) cancel();
    }
  }

  /** One engine step: retire cancelled requests, schedule, run one batched pass, sample and stream. */
  async step(): Promise<void> {
    for (const req of this.active) if (req.group.cancelRequested && !req.sequence.finished) {
      req.sequence.cancel();
      this.retire(req);
    }
    const plan = this.scheduler.schedule();
    for (const { seq, cachedTokens } of plan.admitted) {
      this.counters.prefixHitTokens += cachedTokens;
      if (!seq.admitted) seq.sequence.cachedTokens = cachedTokens;
      seq.admitted = true;
    }
    if (plan.rows.length === 0) return;

    const starts = plan.rows.map((r) => r.seq.kv.length);
    const logits = await this.runner.forward(plan.rows.map((r) => ({ kv: r.seq.kv, tokens: r.tokens })));
    this.counters.steps++;
    this.counters.lastBatchSize = plan.rows.length;
    this.counters.lastStepTokens = plan.rows.reduce((n, r) => n + r.tokens.length, 0);

    plan.rows.forEach(({ seq: req, tokens, samples }, i) => {
      this.kv.commit(req.kv, req.tokens);
      const decode = samples && tokens.length === 1 && starts[i] >= req.sequence.request.promptIds.length;
      if (!decode) this.counters.prefillTokens += tokens.length;
      if (!samples || req.sequence.finished) return;
      // The prompt is prefilled: siblings fork its cache now and sample from the same logits.
      const forks = req.forks.splice(0).map((child) => this.startFork(req, child));
      for (const seq of [req, ...forks]) this.sample(seq, logits.last(i));
    });
  }

  private sample(req: EngineRequest, logits: Float32Array): void {
    const event = req.sequence.onLogits(logits);
    this.counters.generatedTokens++;
    req.tokens.push(event.tokenId);
    req.group.events.push(event);
    if (req.sequence.finished) this.retire(req);
  }

  /** A sibling takes a copy-on-write share of every block of `parent` and runs from here on its own. */
  private startFork(parent: EngineRequest, child: EngineRequest): EngineRequest {
    child.kv = this.kv.fork(parent.kv);
    child.tokens = [...parent.tokens];
    child.admitted = true;
    child.sequence.cachedTokens = parent.sequence.cachedTokens;
    this.scheduler.adopt(child);
    return child;
  }

  /** Takes a finished (or cancelled) request out of the batch at once, freeing its blocks or pinning them for its session. */
  private retire(req: EngineRequest): void {
    // A cancel that arrived during the last pass (a session being deleted) keeps nothing either.
    if (req.session !== undefined && req.sequence.finishReason !== 'cancelled' && !req.group.cancelRequested) {
      this.scheduler.detach(req);
      this.releaseSession(req.session);
      this.pinned.set(req.session, { kv: req.kv, tokens: req.tokens.slice(0, req.kv.length) });
    } else {
      this.scheduler.remove(req);
    }
    this.active.delete(req);
    req.group.events.push(req.sequence.done());
    // Siblings that never forked (cancelled before the prompt was prefilled) end with it.
    for (const child of req.forks.splice(0)) {
      child.sequence.cancel();
      this.retire(child);
    }
  }

  /** The session's cache, if it holds a strict prefix of `tokens`; otherwise it is released. */
  private takeSessionCache(session: string, tokens: readonly number[]): PagedSequenceKv | undefined {
    const pin = this.pinned.get(session);
    if (!pin) return undefined;
    this.pinned.delete(session);
    if (pin.tokens.length < tokens.length && pin.tokens.every((t, i) => t === tokens[i])) return pin.kv;
    this.kv.free(pin.kv);
    return undefined;
  }

  /** Tokens a session's kept cache holds now (0 once released for room, or never kept). */
  sessionCachedTokens(session: string): number {
    return this.pinned.get(session)?.kv.length ?? 0;
  }

  /** Frees a session's cache between turns (session deleted, or memory wanted). */
  releaseSession(session: string): void {
    const pin = this.pinned.get(session);
    if (!pin) return;
    this.pinned.delete(session);
    this.kv.free(pin.kv);
  }

  private releaseOldestSession(): boolean {
    const oldest = this.pinned.keys().next();
    if (oldest.done) return false;
    this.releaseSession(oldest.value);
    return true;
  }

  private kick(): void {
    if (this.looping || this.options.autoRun === false) return;
    this.looping = true;
    void this.loop();
  }

  private async loop(): Promise<void> {
    try {
      while (this.scheduler.hasWork || [...this.active].some((r) => r.group.cancelRequested)) {
        await this.step();
        await yieldToEventLoop();
      }
    } catch (err) {
      // A failed pass is a bug or a broken runtime: every request in flight learns of it, none hangs.
      const error = err instanceof Error ? err : new Error(String(err));
      for (const req of this.active) {
        this.scheduler.remove(req);
        req.group.events.push(error);
      }
      this.active.clear();
    } finally {
      this.looping = false;
    }
  }

  /** True while any request is queued or running. */
  get busy(): boolean {
    return this.active.size > 0;
  }

  stats(): EngineStats {
    const pool = this.kv.pool;
    const bytesPerToken = kvBytesPerToken(this.config);
    return {
      kv: { ...pool.stats(), blockSize: pool.blockSize, bytesPerToken, bytesTotal: pool.numBlocks * pool.blockSize * bytesPerToken },
      ...this.counters,
      preemptions: this.scheduler.preemptions,
      copyOnWrites: this.kv.copyOnWrites,
      queueDepth: this.scheduler.waiting.length,
      pinnedSessions: this.pinned.size,
      running: this.scheduler.running.length,
    };
  }
}

import type { NamedAdapter } from '../adapters/adapter-cache.js';
import type { KvDtype, KvShape } from '../kv/block-pool.js';
import type { KvMemory } from '../kv/kv-memory.js';
import type { PagedSequenceKv } from '../kv/paged-kv.js';
import type { ModelConfig } from '../model/config.js';
import type { SampledToken } from '../sampling/sampler.js';
import type { DeviceSamplerState } from '../sampling/device-sampler-state.js';

/** One sequence in a model pass: the tokens it feeds now, and its paged cache holding everything before them. */
export interface StepRow {
  kv: PagedSequenceKv;
  /** New tokens, at positions kv.length, kv.length + 1, ... (non-empty). */
  tokens: readonly number[];
  /**
   * How many of the row's last positions the caller will read logits for (a speculative verification reads
   * one per proposal and one after them); default 1. A runner may compute them together; `at` still works
   * for any position.
   */
  logits?: number;
}

/**
 * What a pass produced: next-token logits for every fed token of every row. An array returned may be a view of
 * the runner's scratch, good until the next call (the kernels compute a chunk of rows as they are read): read it,
 * or copy it, before asking for another.
 */
export interface StepLogits {
  /** Logits after row `row`'s token `index` (index into that row's `tokens`), vocab_size floats. */
  at(row: number, index: number): Float32Array;
  /** Logits after each row's last fed token. */
  last(row: number): Float32Array;
  /**
   * The final-normed hidden states after each of row `row`'s fed tokens ((tokens, hidden) floats, copied out),
   * what embeddings pool; absent on a runner that cannot give them.
   */
  hidden?(row: number): Float32Array;
}

/** Which implementation runs the passes: our WebAssembly kernels, onnxruntime (on the runtime's backend), or our WGSL pass. */
export type RunnerName = 'kernels' | 'onnxruntime' | 'wgsl';

/** A runner's figures for the engine's stats (and so /metrics). */
export interface RunnerStats {
  runner: RunnerName;
  /** The kernels' linear memory (weights, KV pool, scratch); absent where the engine cannot see the memory. */
  wasmMemoryBytes?: number;
  /** A model split over pipeline stages: each stage's layers, memory and hops. */
  stages?: StageStats[];
  /** A GPU host runs the passes (RemoteRunner): what runs there, and the passes sent. */
  host?: HostStats;
}

/** A GPU host, as the object sees it. */
export interface HostStats {
  /** host:port, never the secret. */
  where: string;
  /** Whether a session is open and its KV trusted. */
  connected: boolean;
  runner: string;
  backend: string | null;
  adapter: string | null;
  weightBytes: number;
  kvBytes: number;
  /** Passes answered, their round trips and the host's own compute time in them, in ms. */
  passes: number;
  passMs: number;
  computeMs: number;
  /** Sessions opened again (the host restarted or a call failed), and calls that failed. */
  reconnects: number;
  failures: number;
}

/** One pipeline stage, as the head sees it. */
export interface StageStats {
  /** Its layers, [from, to). */
  layers: { from: number; to: number };
  weightBytes: number;
  kvBytes: number;
  /** Its isolate's counted use when it last said (every stage object in that isolate). */
  isolateBytes: number | undefined;
  /** Passes sent, their round trips and the stage's own compute time in them, in ms. */
  hops: number;
  hopMs: number;
  computeMs: number;
  /** Times it was found restarted (its KV lost). */
  restarts: number;
}

/** One token to draw where the logits are: from row `row`'s last logits, with this sampler state. */
export interface DeviceDraw {
  row: number;
  state: DeviceSamplerState;
  grammarMask?: Int32Array;
}

/** Drawing tokens where the logits are (WebGPU): only ids, and the logits only when asked, come back. */
export interface DeviceSampling {
  forwardAndSample(
    rows: readonly StepRow[],
    draws: readonly DeviceDraw[],
    vocab: number,
    download: boolean,
  ): Promise<{ logits: StepLogits | undefined; sampled: SampledToken[] }>;
}

/**
 * What the engine knows of a runner, and all it knows: as vLLM's engine core sees only its executor. The
 * engine owns the block pool's bookkeeping; the runner provides the pool's memory, computes passes over
 * it, and may draw tokens itself. Implementations: KernelRunner (our WebAssembly kernels), OnnxRunner
 * (onnxruntime-node / -web), GpuRunner (onnxruntime's WebGPU EP with the pool on the device), WgslRunner (our
 * own WGSL forward pass, webgpu/pass/).
 */
export interface ModelRunner {
  readonly config: ModelConfig;
  readonly name: RunnerName;
  /**
   * Besides the weights, what decides the bytes a KV block holds: part of the durable KV store's cache
   * identity, so a block is never restored into a runner that would have computed other bytes.
   */
  readonly kvIdentity: string;
  /** Present where tokens are drawn on the device; the engine then samples through it. */
  readonly deviceSampling: DeviceSampling | undefined;
  /**
   * Why this runner cannot give logits at every position of a pass (StepLogits.at past the positions asked
   * for), which prompt logprobs read; absent where it can.
   */
  readonly noPromptLogprobs?: string;
  /** Whether its passes give the final-normed hidden states (StepLogits.hidden) that embeddings pool. */
  readonly givesHiddenStates?: boolean;
  /**
   * True where each row may run with a LoRA adapter of its own (its sequence's `kv.variant`): the kernels, whole or on
   * stages, the WGSL pass, and a GPU host that says it runs them. Absent: adapters are refused when loaded
   * (onnxruntime does not run them).
   */
  readonly rowAdapters?: boolean;
  /**
   * Where the passes run elsewhere (a GPU host, pipeline stages): has that side read `adapter` from its own folder
   * now, so a refusal (missing, or not the same files) fails the request that names it, at load, instead of a later
   * pass and every row in it. Absent where the runner computes here.
   */
  prepareAdapter?(adapter: NamedAdapter): Promise<void>;
  /**
   * The memory of the engine's block pool (once): where the runner reads and writes keys and values, block
   * ids being the pool's. Refuses (InvalidRequestError) a KV dtype it cannot compute with.
   */
  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): KvMemory;
  /**
   * One batched pass: every row's new tokens attend to its cache, are written into it, and give logits.
   * A runner whose pass is synchronous (our kernels) returns the logits themselves: they may live in
   * scratch that engines of the same isolate share, valid until the next pass, so a caller reads them
   * before it yields (`settled` keeps a synchronous result synchronous).
   */
  forward(rows: readonly StepRow[]): StepLogits | Promise<StepLogits>;
  /**
   * Passes the engine may keep in flight at once, over disjoint sequences (a runner over pipeline stages: while
   * one pass is on stage 2, the next is on stage 1). Such a runner's forward may be called again before the last
   * one settled, and its logits stay readable after another pass. Absent: 1.
   */
  readonly passesInFlight?: number;
  stats(): RunnerStats;
  release(): Promise<void>;
}

/** A value or its promise, continued without a microtask in between when it is already a value. */
export function settled<T, U>(value: T | Promise<T>, then: (value: T) => U): U | Promise<U> {
  return value instanceof Promise ? value.then(then) : then(value);
}

/**
 * A runner's KV memory lost what it held (a pipeline stage restarted): every cached block's bytes are gone.
 * The engine forgets its prefix cache and recomputes every sequence from its tokens; `fatal` (the memory was
 * lost pass after pass: the pass itself may bring it down) fails the pass's requests instead of retrying them.
 */
export class KvLostError extends Error {
  constructor(
    message: string,
    readonly fatal = false,
  ) {
    super(message);
  }
}

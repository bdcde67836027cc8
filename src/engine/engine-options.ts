import type { LoraAdapter } from './adapters/lora-adapter.js';
import type { EngineLimits } from './defaults.js';
import type { KvBlockStore } from './kv/block-store.js';
import type { KvDtype } from './kv/kv-dtype.js';
import type { ModelDtype } from './model/model-files.js';
import type { RunnerOptions } from './runners/runner-options.js';
import type { IsolateShare } from './runners/isolate-pool.js';
import type { DraftModelOptions } from './speculative/load-draft.js';
import type { SpeculativeParams } from './speculative/speculative-params.js';

export interface EngineOptions
  extends Partial<EngineLimits>,
    Omit<RunnerOptions, keyof EngineLimits | 'isolateBudget'> {
  /** Which weights: unset, the folder's default (model/default-weights.ts: its only weights, else GGUF, else fp32). */
  dtype?: ModelDtype;
  /** The host's name for `dtype`, for the refusal that lists a folder's weights (`MODEL_DTYPE`, `--dtype`). */
  dtypeOption?: string;
  /** Name the model is served under; also part of every prefix-cache block hash. */
  modelId?: string;
  /**
   * Bytes of LoRA adapters kept loaded (least recently used out past it), counted in the memory budget
   * (ADAPTER_CACHE_MB). Unset: ADAPTER_CACHE_DEFAULT_BYTES where the folder lists adapters (adapters/index.json),
   * else none; 0 turns adapters off.
   */
  adapterCacheBytes?: number;
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
  /** A LoRA adapter the request runs with (Engine.loadAdapter); its blocks are cached apart from the base's. */
  adapter?: LoraAdapter;
}

/// <reference types="@cloudflare/workers-types" />
import type { RunnerChoice } from './engine/model/runtime.js';
import { InvalidRequestError } from './engine/errors.js';
import type { KvDtype } from './engine/kv/kv-dtype.js';
import type { ModelLocations } from './sources/model-source.js';

/**
 * Bindings and vars (wrangler.toml). Vars arrive as strings; read them with `intVar`/`boolVar`, which fall
 * back to the documented defaults when a var is unset or empty.
 */
export interface Env {
  /** The inference objects (untyped here, so that env.ts imports no object: worker/routing.ts's shardStub types it). */
  INFERENCE: DurableObjectNamespace<Rpc.DurableObjectBranded>;
  MODELS: Fetcher;
  /** Real models (over the assets' 25 MiB per-file cap), uploaded with `npm run model:upload`. */
  MODEL_BUCKET?: R2Bucket;
  /** Bearer keys, comma-separated, each `name:key` or a bare key (named by its hash); see src/objects/tenancy/api-keys.ts. */
  API_KEYS?: string;
  /** Keys the owner ids of sessions, hooks and jobs (HMAC of the key's name); set once, before keys are handed out. */
  OWNER_SECRET?: string;
  /** The key name that owns rows made before tenants, when API_KEYS names more than one key. */
  LEGACY_OWNER?: string;
  /** Per-key limits as JSON (src/objects/tenancy/rate-limit-config.ts); unset or empty = none. */
  RATE_LIMITS?: string;
  /** Signs session and job ids (HMAC), so a signed id's shard is trusted past SHARD_COUNT; see src/worker/shard-ids.ts. */
  ID_SECRET?: string;
  SHARD_COUNT?: string;
  /** The served model's folder name (and id); MODEL_NAME is its older spelling and overrides it. */
  MODEL?: string;
  MODEL_NAME?: string;
  MODEL_DTYPE?: string;
  /** Read the model folder from this URL instead of the bucket or assets. */
  MODEL_URL?: string;
  MEMORY_BUDGET_MB?: string;
  KV_CACHE_MB?: string;
  /** MiB kept for LoRA adapters (an LRU within MEMORY_BUDGET_MB); unset: 16 where the model lists adapters, 0 turns them off. */
  ADAPTER_CACHE_MB?: string;
  /** The KV cache's element type: fp32 (default) or fp16 (twice the tokens in KV_CACHE_MB; edge kernels only). */
  KV_DTYPE?: string;
  /** Storage for full KV blocks in each object's SQLite, so sessions survive restarts; 0 turns it off. */
  KV_STORE_MB?: string;
  MAX_BATCH?: string;
  /**
   * Origins a browser page may call the API from (CORS): comma-separated (`https://a.example,https://b.example`),
   * or `*` for any. Unset: none, except in dev mode (no API_KEYS), where any origin may.
   */
  CORS_ORIGINS?: string;
  MAX_QUEUE?: string;
  /** /v1/embeddings: inputs one request may carry, and tokens one input may have. */
  EMBEDDINGS_MAX_INPUTS?: string;
  EMBEDDINGS_MAX_INPUT_TOKENS?: string;
  MAX_BODY_BYTES?: string;
  /** Milliseconds a whole model load may take before it fails (503 model_unavailable; the next request retries). */
  MODEL_LOAD_TIMEOUT_MS?: string;
  /** Milliseconds a model read may wait for its next chunk (1 MiB, or a small file whole) before the load fails. */
  MODEL_STALL_TIMEOUT_MS?: string;
  /** Unfinished (queued or generating) webhook jobs one key may have on a shard; further events get 429. */
  MAX_JOBS_PER_KEY?: string;
  /** Days a stored response (POST /v1/responses) is kept; default 30. */
  RESPONSES_TTL_DAYS?: string;
  /** Stored responses one key may keep on a shard; further ones with store: true get 429. */
  MAX_RESPONSES_PER_KEY?: string;
  /** Megabytes of stored responses (their text and token logs) one key may keep on a shard. */
  MAX_RESPONSE_MB_PER_KEY?: string;
  /** Conversations (POST /v1/conversations) one key may keep on a shard; creating another gets 429. */
  MAX_CONVERSATIONS_PER_KEY?: string;
  /** Megabytes of conversations (their items and token logs) one key may keep on a shard; past it, adding gets 429. */
  MAX_CONVERSATION_MB_PER_KEY?: string;
  /** Sessions one key may keep on a shard; creating another gets 429 (src/objects/tenancy/storage-quota.ts). */
  MAX_SESSIONS_PER_KEY?: string;
  /** Hooks one key may keep on a shard; creating another gets 429. */
  MAX_HOOKS_PER_KEY?: string;
  /** Milliseconds a request body may take to arrive in full before the request is refused (408). */
  BODY_READ_TIMEOUT_MS?: string;
  WEBHOOK_RETRY_BASE_MS?: string;
  WEBHOOK_MAX_ATTEMPTS?: string;
  ALLOW_LOOPBACK_CALLBACKS?: string;
  /** `true` shares cached prompt prefixes between keys (a public system prompt); default: each key's are its own. */
  SHARED_PREFIX_CACHE?: string;
  /** `auto` (default: webgpu where navigator.gpu exists, else wasm), `wasm`, `kernels`, `ort-wasm` or `webgpu` (see BACKENDS). */
  BACKEND?: string;
  /** Speculative decoding for requests that do not ask: `ngram:<γ>` or `draft:<γ>`; empty = none. */
  SPECULATIVE?: string;
  /** The draft model's folder name (found like MODEL), for `speculative.method: "draft"`. */
  DRAFT_MODEL?: string;
  /** `false` frees whitespace between JSON tokens in constrained outputs (vLLM's option); default true. */
  DISABLE_ANY_WHITESPACE?: string;
  /** A chat template (Jinja) for a model whose tokenizer_config.json has none (a base model), or instead of its own. */
  CHAT_TEMPLATE?: string;
  /** The model's layers on this many stage Workers (bound as STAGE_1 .. STAGE_N); unset or 0: in the head's isolate. */
  PIPELINE_STAGES?: string;
  /**
   * The pipeline this head is (its script's name, and `npm start`'s run tag), written by the generated config:
   * its stage objects are named for it, so two heads bound to the same stage scripts never share a stage.
   */
  PIPELINE_HEAD?: string;
  /** Micro-batches a pass over stages is split into (default 1: each pass whole). */
  PIPELINE_MICROBATCHES?: string;
  /** Milliseconds a stage that stops answering is waited for (a restart) before its requests fail; default 30000. */
  PIPELINE_STAGE_WAIT_MS?: string;
  /** Passes the head keeps in flight over its stages (default: one per stage, so stages compute at once; 1: one). */
  PIPELINE_IN_FLIGHT?: string;
  /** Where a pipeline's embedding and output projection live: `head`, `stages` (split by rows), or `auto` (default). */
  PIPELINE_VOCAB?: string;
  /** A GPU host that runs the model (npm run gpu-host): the objects hold no weights, only the KV pool's bookkeeping. */
  GPU_HOST_URL?: string;
  /** The GPU host's shared secret (a secret, not a var: `wrangler secret put GPU_HOST_SECRET`). */
  GPU_HOST_SECRET?: string;
}

/** PIPELINE_STAGE_WAIT_MS: a whole number of milliseconds >= 1, or undefined (30 s) when unset or not one. */
export function stageWaitVar(env: Env): number | undefined {
  return wholeVar(env.PIPELINE_STAGE_WAIT_MS);
}

/** PIPELINE_MICROBATCHES: a whole number >= 1, or undefined (1) when unset or not one. */
export function microBatchesVar(env: Env): number | undefined {
  return wholeVar(env.PIPELINE_MICROBATCHES);
}

/** PIPELINE_IN_FLIGHT: a whole number >= 1, or undefined (the stage count) when unset or not one. */
export function inFlightVar(env: Env): number | undefined {
  return wholeVar(env.PIPELINE_IN_FLIGHT);
}

function wholeVar(raw: string | undefined): number | undefined {
  const n = Number(raw?.trim() || NaN);
  return Number.isSafeInteger(n) && n >= 1 ? n : undefined;
}

/** PIPELINE_VOCAB: `head`, `stages` or `auto` (unset or empty). */
export function pipelineVocabVar(env: Env): 'head' | 'stages' | 'auto' {
  const raw = env.PIPELINE_VOCAB?.trim() || 'auto';
  if (raw === 'head' || raw === 'stages' || raw === 'auto') return raw;
  throw new InvalidRequestError(
    'PIPELINE_VOCAB',
    `PIPELINE_VOCAB must be head, stages or auto, got ${JSON.stringify(raw)}`,
    'unsupported_model',
  );
}

/** PIPELINE_STAGES: 0 (unset, empty, 0) keeps every layer in the head's isolate. */
export function pipelineStagesVar(env: Env): number {
  const raw = env.PIPELINE_STAGES?.trim() ?? '';
  if (raw === '' || raw === '0') return 0;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1 || n > 64)
    throw new InvalidRequestError(
      'PIPELINE_STAGES',
      `PIPELINE_STAGES must be a whole number 0..64, got ${JSON.stringify(raw)}`,
      'unsupported_model',
    );
  return n;
}

export const DEFAULTS = {
  SHARD_COUNT: 2,
  MODEL_NAME: 'wordnet-chat',
  MODEL_DTYPE: 'fp32',
  KV_CACHE_MB: 16,
  /** Weights + KV pool an object may hold: a Workers isolate has 128 MB in all. */
  MEMORY_BUDGET_MB: 128,
  MAX_BATCH: 16,
  MAX_QUEUE: 64,
  EMBEDDINGS_MAX_INPUTS: 32,
  EMBEDDINGS_MAX_INPUT_TOKENS: 512,
  MAX_BODY_BYTES: 1 << 20,
  MODEL_LOAD_TIMEOUT_MS: 300_000,
  MODEL_STALL_TIMEOUT_MS: 30_000,
  MAX_JOBS_PER_KEY: 16,
  RESPONSES_TTL_DAYS: 30,
  MAX_RESPONSES_PER_KEY: 10_000,
  MAX_RESPONSE_MB_PER_KEY: 64,
  MAX_SESSIONS_PER_KEY: 1000,
  MAX_CONVERSATIONS_PER_KEY: 1000,
  MAX_CONVERSATION_MB_PER_KEY: 64,
  MAX_HOOKS_PER_KEY: 100,
  BODY_READ_TIMEOUT_MS: 10_000,
  WEBHOOK_RETRY_BASE_MS: 2000,
  WEBHOOK_MAX_ATTEMPTS: 6,
} as const;

type IntVar = { [K in keyof typeof DEFAULTS]: (typeof DEFAULTS)[K] extends number ? K : never }[keyof typeof DEFAULTS];

/** A numeric var, or its default when unset, empty or not a positive integer (0 shards, blocks or queue slots would refuse everything). */
export function intVar(env: Env, name: IntVar): number {
  const raw = env[name];
  const value = raw === undefined || raw.trim() === '' ? NaN : Number(raw);
  return Number.isSafeInteger(value) && value >= 1 ? value : DEFAULTS[name];
}

/** ADAPTER_CACHE_MB in bytes; undefined when unset or not a number ≥ 0 (the engine's default then). */
export function adapterCacheVar(env: Env): number | undefined {
  const raw = env.ADAPTER_CACHE_MB?.trim();
  const value = raw ? Number(raw) : NaN;
  return Number.isFinite(value) && value >= 0 ? Math.floor(value * 2 ** 20) : undefined;
}

export function modelName(env: Env): string {
  // wrangler.toml sets MODEL; MODEL_NAME (the older name) is set only when passed, so it wins then.
  return env.MODEL_NAME?.trim() || env.MODEL?.trim() || DEFAULTS.MODEL_NAME;
}

/** Where this Worker's bindings let it read a model folder: MODEL_URL, the R2 bucket, the static assets. */
export function modelLocations(env: Env): ModelLocations {
  return { bucket: env.MODEL_BUCKET, assets: env.MODELS, url: env.MODEL_URL?.trim() || undefined };
}

export function boolVar(env: Env, name: 'ALLOW_LOOPBACK_CALLBACKS' | 'SHARED_PREFIX_CACHE'): boolean {
  return env[name]?.trim().toLowerCase() === 'true';
}

/** DISABLE_ANY_WHITESPACE: only an explicit `false` frees JSON whitespace by default. */
export function anyJsonWhitespaceVar(env: Env): boolean {
  return env.DISABLE_ANY_WHITESPACE?.trim().toLowerCase() === 'false';
}

/**
 * `wasm` runs Llama graphs on our edge kernels and other graphs on onnxruntime-web; `kernels` and
 * `ort-wasm` insist on one of the two (the bench compares them); `auto` is wasm unless WebGPU runs here.
 */
export const BACKENDS = ['auto', 'wasm', 'kernels', 'ort-wasm', 'webgpu'] as const;
export type BackendChoice = (typeof BACKENDS)[number];

/** The BACKEND var; unset, empty or unknown values fall back to `auto`, as other vars fall back to their defaults. */
export function backendVar(env: Env): BackendChoice {
  const raw = env.BACKEND?.trim().toLowerCase() ?? '';
  return (BACKENDS as readonly string[]).includes(raw) ? (raw as BackendChoice) : 'auto';
}

/** Whether this isolate has WebGPU (workerd from npm has none: docs/platform.md). */
export function hostHasWebGpu(): boolean {
  return typeof navigator !== 'undefined' && (navigator as { gpu?: unknown }).gpu !== undefined;
}

/**
 * The backend the shards run on: a forced choice as given; `auto` is webgpu only where the host has
 * WebGPU and this build can run onnxruntime-web's WebGPU EP there (`webgpuRunnable`; not in workerd yet).
 */
export function resolveBackend(choice: BackendChoice, hasWebGpu: boolean, webgpuRunnable = false): 'wasm' | 'webgpu' {
  if (choice === 'kernels' || choice === 'ort-wasm') return 'wasm';
  if (choice !== 'auto') return choice;
  return hasWebGpu && webgpuRunnable ? 'webgpu' : 'wasm';
}

/** What the service reports in /v1/models and /metrics: the backend BACKEND resolves to on this host. */
export function serviceBackend(env: Env): 'wasm' | 'webgpu' {
  return resolveBackend(backendVar(env), hostHasWebGpu());
}

/**
 * Inside workerd the engine runs on WASM: `auto` resolves to it (no navigator.gpu), and a forced `webgpu` cannot
 * load, which an object reports as a 503 naming the reason (InvalidRequestError is how a model that cannot be
 * served is told). Shared by the head's shards and the stage Workers (src/objects/shard-runtime.ts, stage-runtime.ts).
 */
export function requireWasmBackend(env: Env): void {
  if (serviceBackend(env) !== 'webgpu') return;
  throw new InvalidRequestError(
    'BACKEND',
    hostHasWebGpu()
      ? "BACKEND=webgpu: onnxruntime-web's WebGPU build is not wired into workerd yet; use auto or wasm"
      : `BACKEND=${backendVar(env)} but this host has no WebGPU (navigator.gpu); use auto or wasm`,
    'backend_unavailable',
  );
}

/** KV_DTYPE: fp32 unless set; a value other than fp32 / fp16 / int8 is passed on for the engine to refuse by name (a 503). */
export function kvDtypeVar(env: Env): KvDtype {
  return (env.KV_DTYPE?.trim().toLowerCase() || 'fp32') as KvDtype;
}

/** Default KV_STORE_MB: about 5,700 tokens of a SmolLM2-135M-shaped model's fp32 KV per shard (45 KiB a token). */
export const DEFAULT_KV_STORE_MB = 256;

/** KV_STORE_MB in bytes: the default when unset or not a whole number, 0 (no store) when 0. */
export function kvStoreBytesVar(env: Env): number {
  const raw = env.KV_STORE_MB?.trim() ?? '';
  const mb = /^[0-9]+$/.test(raw) ? Number(raw) : DEFAULT_KV_STORE_MB;
  return mb * 2 ** 20;
}

/** Which runner the wasm backend uses: our kernels where they cover the graph (`auto`), or as forced. */
export function runnerChoice(env: Env): RunnerChoice {
  const choice = backendVar(env);
  return choice === 'kernels' ? 'kernels' : choice === 'ort-wasm' ? 'onnxruntime' : 'auto';
}

/**
 * The SPECULATIVE var as `{ method, num_tokens }` (its values are the engine's to check), or undefined
 * when empty. A malformed value is refused when the engine loads, as a 503 naming it, not ignored.
 */
export function speculativeVar(env: Env): { method: string; num_tokens: number } | undefined {
  const raw = env.SPECULATIVE?.trim() ?? '';
  if (raw === '') return undefined;
  const [method, count = ''] = raw.split(':');
  return { method, num_tokens: /^[0-9]+$/.test(count) ? Number(count) : NaN };
}

/** GPU_HOST_URL and GPU_HOST_SECRET, or undefined where no GPU host is configured; a URL without a secret is refused. */
export function gpuHostVar(env: Env): { url: string; secret: string } | undefined {
  const url = env.GPU_HOST_URL?.trim() ?? '';
  if (url === '') return undefined;
  const secret = env.GPU_HOST_SECRET?.trim() ?? '';
  if (!/^https?:\/\//.test(url))
    throw new InvalidRequestError(
      'GPU_HOST_URL',
      `GPU_HOST_URL must be an http(s) URL, got ${JSON.stringify(url)}`,
      'unsupported_model',
    );
  if (secret === '')
    throw new InvalidRequestError(
      'GPU_HOST_SECRET',
      'GPU_HOST_URL is set but GPU_HOST_SECRET is not: set the secret the host was started with',
      'unsupported_model',
    );
  return { url, secret };
}

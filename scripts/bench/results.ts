import type { StructuredBench } from './structured.js';
import type { EmbeddingsBench } from './embeddings.js';
import type { SpeculationCase } from './speculative-table.js';
import type { WebGpuBenchRow } from './webgpu-table.js';
import type { GpuBench } from './gpu.js';
import type { WllamaBenchRow } from './wllama-table.js';
import type { KernelsBench } from './kernels-table.js';
import type { EdgeBench } from './edge.js';
import type { EdgeMemoryBench } from './edge-memory.js';
import type { StagesBench } from './stages.js';
import type { ArchitectureBenchRow } from './architectures-table.js';
import type { LoraBench } from './lora.js';
// The shape of bench/results.json.
import type { Sampled } from './stats.js';
import type { ServiceResult } from './service.js';

export type { ServiceResult } from './service.js';
import type { StepPhases } from './overhead.js';
import type { BenchOptions, Backend, Variant } from './options.js';

export interface VariantResult extends Variant {
  backend: Backend;
  weightBytes: number;
  kvBytesPerToken: number;
  /** Aggregate decode tokens/s by concurrent sequences. */
  decode: Record<string, Sampled>;
  /** Aggregate at n sequences ÷ 1 sequence, run by run. */
  decodeVsBatch1: Record<string, Sampled>;
  /** Batch-1 decode ÷ the same model's fp32 batch-1 decode, run by run (quantised variants). */
  decodeVsFp32?: Sampled;
  /** Prefill tokens/s and time to first token by prompt length. */
  prefill: Record<string, { tokPerS: Sampled; ttftMs: Sampled }>;
  /** Time to first token of a fresh `freshPromptTokens`-token prompt. */
  ttftFreshMs?: Sampled;
  peers?: {
    bareOrt: { decode: Sampled; engineRatio: Sampled; sameTokens: boolean };
    transformersJs?: { decode: Sampled; engineRatio: Sampled };
  };
  roofline?: { bytesPerToken: number; context: number; rooflineTokPerS: number; fractionOfRoofline: Sampled };
  sessions?: Record<
    string,
    {
      historyTokens: number;
      cachedMs: Sampled;
      rebuiltMs: Sampled;
      /** Restored from the KV block store (absent in results older than the store). */
      restoredMs?: Sampled;
      cachedVsFresh: Sampled;
      rebuiltVsCached: Sampled;
      rebuiltVsRestored?: Sampled;
      restoredVsFresh?: Sampled;
    }
  >;
  overhead?: Record<string, StepPhases & { outsideShareRuns: number[] }>;
}

export interface BackendResult {
  backend: Backend;
  bandwidthGBps?: Sampled;
  variants: VariantResult[];
  seconds: number;
}

/** A 10-turn response chain against re-sending the history as chat completions (scripts/bench/responses-chain.ts). */
export interface ResponsesChainResult {
  model: string;
  byTurn: {
    turn: number;
    inputTokens: number;
    resendInputTokens: number;
    chainCached: number;
    resendCached: number;
    chainTtftMs: Sampled;
    resendTtftMs: Sampled;
    resendVsChain: Sampled;
  }[];
}

/** Durable session KV in workerd (scripts/bench/service-restore.ts): one request over a stored history, by history length. */
export interface ServiceRestoreResult {
  model: string;
  byHistory: Record<
    string,
    {
      cachedMs: Sampled;
      restoredMs: Sampled;
      rebuiltMs: Sampled;
      freshMs: Sampled;
      rebuiltVsRestored: Sampled;
      restoredVsFresh: Sampled;
    }
  >;
}

export interface Machine {
  cpu: string;
  cores: number;
  memoryGiB: number;
  os: string;
  node: string;
  onnxruntimeNode: string;
  onnxruntimeWeb: string;
  transformersJs: string;
  date: string;
}

export interface BenchResults {
  machine: Machine;
  options: BenchOptions;
  backends: BackendResult[];
  service?: ServiceResult;
  serviceRestore?: ServiceRestoreResult;
  responsesChain?: ResponsesChainResult;
  /** Structured outputs: a step at 16 constrained streams against free ones, grammar compile times (scripts/bench/structured.ts). */
  structured?: StructuredBench;
  /** Embeddings per second at batch 1 and 32 on the kernels, fp32 and q4 (scripts/bench/embeddings.ts). */
  embeddings?: EmbeddingsBench[];
  /** Decode with and without speculation, same prompts, same run (scripts/bench/speculative.ts; cpu). */
  speculative?: SpeculationCase[];
  /** The same on the edge kernels (backend wasm, which runs Llama graphs on them). */
  speculativeKernels?: SpeculationCase[];
  /** webgpu against wasm on tiny (scripts/bench/webgpu.ts): on lavapipe this measures dispatch overhead, not a GPU. */
  webgpu?: WebGpuBenchRow[];
  /** The gpu section (scripts/bench/gpu.ts): labelled by adapter kind; lavapipe's rows are correctness only. */
  gpu?: GpuBench;
  /** llama.cpp's WebAssembly build on bench-135m as GGUF F32/Q8_0/Q4_0, batch-1 decode (scripts/bench/wllama.ts). */
  wllama?: WllamaBenchRow[];
  /** Our edge kernels against onnxruntime-web on bench-135m (scripts/bench/kernels.ts). */
  kernels?: KernelsBench;
  /** The engine in wrangler dev over HTTP against the same engine in Node (scripts/bench/edge.ts). */
  edge?: EdgeBench;
  /** The isolate's memory in workerd, idle, loaded and streaming (scripts/bench/edge-memory.ts). */
  edgeMemory?: EdgeMemoryBench;
  /** A model on pipeline stages in wrangler dev: every isolate's memory, tokens and speed (scripts/bench/stages.ts). */
  stages?: StagesBench;
  /** Qwen2, Qwen3 and Gemma 3 shapes on the kernels against llama.cpp (scripts/bench/architectures.ts). */
  architectures?: ArchitectureBenchRow[];
  /** LoRA adapter rows against base rows on the kernels (scripts/bench/lora.ts). */
  lora?: LoraBench;
  /** When the run was made in parts (--append): each part's machine and options. */
  parts?: { machine: Machine; options: BenchOptions }[];
}

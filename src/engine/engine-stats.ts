import type { BlockPoolStats } from './kv/block-pool.js';
import type { PersistCounters } from './kv/block-persistence.js';
import type { KvStoreUsage } from './kv/block-store.js';
import type { RestoreCounters } from './kv/block-restorer.js';
import type { GrammarStats } from './constraints/compiler.js';
import type { HostStats, StageStats } from './runners/model-runner.js';

/** Engine-wide counters and gauges the service exports (e.g. as Prometheus metrics). */
export interface EngineStats {
  kv: BlockPoolStats & { blockSize: number; bytesPerToken: number; bytesTotal: number };
  /** Prompt tokens served from the prefix cache instead of being prefilled. */
  prefixHitTokens: number;
  /** Prompt tokens actually computed (prefill, including recompute after preemption). */
  prefillTokens: number;
  generatedTokens: number;
  preemptions: number;
  copyOnWrites: number;
  /** Requests waiting to be admitted. */
  queueDepth: number;
  /** Sessions whose cache is kept between turns. */
  pinnedSessions: number;
  /** Requests admitted and not yet finished. */
  running: number;
  steps: number;
  /** Of the last step. */
  lastBatchSize: number;
  lastStepTokens: number;
  /** Speculative decoding: tokens proposed to the target, and how many it accepted. */
  proposedTokens: number;
  acceptedTokens: number;
  /** Times the runner's KV memory was lost (a pipeline stage restarted) and every sequence recomputed. */
  kvLosses: number;
  /** A model split over pipeline stages: each stage's layers, memory and hops. */
  stages?: StageStats[];
  /** A GPU host runs the passes: what runs there, and the passes sent. */
  host?: HostStats;
  /** What runs the passes: our WebAssembly kernels, onnxruntime, or our WGSL pass. */
  runner: 'kernels' | 'onnxruntime' | 'wgsl';
  /**
   * Bytes of the kernels' WebAssembly.Memory (weights + KV pool + scratch): the engine's footprint on
   * the kernel runner. Absent on onnxruntime, whose own memory the engine cannot see.
   */
  wasmMemoryBytes?: number;
  /** The draft model's own KV pool, when one is loaded. */
  draftKv?: BlockPoolStats;
  /** The durable KV block store, when the engine has one: its usage, what was written, what was restored. */
  kvStore?: KvStoreUsage & PersistCounters & { restored: RestoreCounters };
  /** Structured outputs: grammar compiles (times), cache hits. */
  grammar: GrammarStats;
}

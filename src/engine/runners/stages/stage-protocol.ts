import type { EngineLimits } from '../../defaults.js';
import type { NamedAdapter } from '../../adapters/adapter-cache.js';
import type { KvDtype } from '../../kv/block-pool.js';
import type { LayerSpan } from '../wasm/weights/llama-weights.js';
import type { ModelDtype } from '../../model/model-files.js';

/**
 * What the head and a pipeline stage say to each other (vLLM's pipeline parallelism; Petals' servers): the
 * head keeps everything the engine knows (tokens, scheduler, block tables, prefix cache, sampling); a stage
 * is memory and compute for a range of layers. One message per stage per pass, never per token or layer.
 * Plain data (numbers, arrays, typed arrays): what Workers RPC carries, structured-cloned.
 */

/** Sent once, and again after the stage lost its state: which layers to load, and the pool they fill. */
export interface StageOpen {
  /** The model as the head names it (its folder), checked against the stage's own. */
  model: string;
  dtype: ModelDtype;
  /** The head's weights file's size, where its source knows it: a stage reading another file (a rollout half done) refuses. */
  fileBytes?: number;
  span: LayerSpan;
  /** The head's pool: block ids are the head's, every stage holds every block for its layers. */
  numBlocks: number;
  kvDtype: KvDtype;
  /** What sizes the stage's scratch (the largest pass the head will send). */
  limits: EngineLimits;
  /**
   * The head's share for LoRA adapters (ADAPTER_CACHE_MB; 0 or absent: none): the stage keeps its layers' part
   * of each adapter a row names within it, read from its own model folder.
   */
  adapterCacheBytes?: number;
}

/** An adapter for the stage to read now, as the head's engine loads it for a request. */
export interface StageAdapterRead {
  epoch: string;
  adapter: NamedAdapter;
}

/** A stage's answer to open: who it is now (a new epoch per load) and what it holds. */
export interface StageInfo {
  epoch: string;
  span: LayerSpan;
  weightBytes: number;
  /** The stage's KV pool for its layers. */
  kvBytes: number;
  /** Its isolate's counted use (every stage object in it), where the host counts it. */
  isolateBytes?: number;
}

/** A block operation the head's pool made: a copy-on-write copy, or a restored block's bytes (the stage's layers' part). */
export type StageOp = { op: 'copy'; from: number; to: number } | { op: 'write'; block: number; bytes: Uint8Array };

/** Block operations the head's pool made since the last step, in the order it made them, applied before the pass. */
export interface StageCommands {
  ops: StageOp[];
}

/** One pass's share for the stage: every row's block table, start and token count, and the hidden states. */
export interface StageStep extends StageCommands {
  /** The stage's epoch the head knows: a stage that is not that one (restarted) answers `lost`. */
  epoch: string;
  rows: { blocks: number[]; start: number; count: number; adapter?: NamedAdapter }[];
  /** (tokens, hidden) float32: every row's tokens end to end, entering the stage's first layer. */
  hidden: Float32Array;
}

export type StageReply =
  | { lost: false; epoch: string; hidden: Float32Array; computeMs: number; isolateBytes?: number }
  | { lost: true; epoch: string | undefined };

/**
 * A block's bytes for the head's durable store. Only a finished sequence's blocks are read, which passes already
 * sent have written: a read carries no commands, so its order against steps does not matter.
 */
export interface StageRead {
  epoch: string;
  block: number;
}

export type StageReadReply = { lost: false; bytes: Uint8Array } | { lost: true; epoch: string | undefined };

/**
 * A vocabulary stage's share of a pass's ends (a vocabulary too large for the head, split by rows): the
 * embedding rows of `ids` (all among its rows), or its rows' logits for `count` positions' final hidden
 * states. Neither touches the KV pool, so neither carries block commands.
 */
export type StageEnds = { epoch: string } & (
  | { op: 'embed'; ids: number[] }
  | { op: 'logits'; hidden: Float32Array; count: number }
);

/** (ids, hidden) embedding rows, or (count, the stage's vocabulary rows) logits. */
export type StageEndsReply = { lost: false; values: Float32Array } | { lost: true; epoch: string | undefined };

/** How the head reaches one stage: a Durable Object's RPC in the service, a direct call in tests. */
export interface StageLink {
  open(open: StageOpen): Promise<StageInfo>;
  step(step: StageStep): Promise<StageReply>;
  read(read: StageRead): Promise<StageReadReply>;
  ends(ends: StageEnds): Promise<StageEndsReply>;
  /**
   * Has the stage read a row's adapter now (its layers' part), before a pass names it: `lost` where the stage is
   * not `epoch`; refused (InvalidRequestError) where it keeps no adapters or its files are not the head's.
   */
  adapter(read: StageAdapterRead): Promise<{ lost: boolean }>;
  /** Who the stage is now (undefined: not open): after a failed call, whether it restarted or only failed. */
  epoch(): Promise<string | undefined>;
  /**
   * The head is done with the stage as `epoch`: its KV pool goes back to the isolate (the layers stay for the
   * isolate's other stage objects). A stage that has since been opened again, as another epoch, keeps that.
   */
  close(epoch: string): Promise<void>;
}

import type { StepRow } from '../model-runner.js';
import type { PassAdapters } from './lora-deltas.js';
import type { PassLayout } from './scratch-layout.js';

/** Pointers of one pass's scratch buffers (scratch-layout.ts has their shapes). */
export type Scratch = { [K in keyof PassLayout]: number };

/** Logits read after another pass reused the scratch they lay in. */
export class StaleLogitsError extends Error {
  constructor() {
    super('kernel logits read after another pass reused the scratch (read them before yielding)');
  }
}

/** One row of a pass as the kernels see it: its block table, where its new tokens start, how many. */
export interface KernelRow {
  blocks: readonly number[];
  start: number;
  count: number;
  /** Last positions to compute logits for (StepRow.logits). */
  logits?: number;
  /** The weights its tokens run with besides the base's (its sequence's adapter; PagedSequenceKv.variant). */
  variant?: unknown;
}

/** A product's input (KernelRunner.input): x, and where its quantised rows are in scratch for quantised weights. */
export interface ProductInput {
  id: number;
  x: number;
  rows: number;
  quantised?: { k: number; blocks: number };
}

/** One pass's layout: where each row's tokens, block table and logits lie, and its scratch. */
export interface Pass {
  rows: readonly KernelRow[];
  counts: number[];
  starts: number[];
  firstToken: number[];
  tableStart: number[];
  /** Tokens of all rows (M). */
  tokens: number;
  want: number[];
  logitStart: number[];
  logitRows: number;
  epoch: number;
  scratch: Scratch;
  /** The rows' LoRA adapters, where any row has one. */
  adapters: PassAdapters | undefined;
}

export function kernelRows(rows: readonly StepRow[]): KernelRow[] {
  return rows.map(({ kv, tokens, logits }) => ({
    blocks: kv.blocks,
    start: kv.length,
    count: tokens.length,
    logits,
    variant: kv.variant,
  }));
}

/** Where each of `sizes` starts when they are laid end to end, and the length of them all. */
export function packedOffsets(sizes: readonly number[]): { offsets: number[]; total: number } {
  const offsets: number[] = [];
  let total = 0;
  for (const n of sizes) {
    offsets.push(total);
    total += n;
  }
  return { offsets, total };
}

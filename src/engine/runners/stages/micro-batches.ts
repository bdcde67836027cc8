import { namedAdapter } from '../../adapters/adapter-cache.js';
import type { KernelRow } from '../wasm/kernel-pass.js';
import type { StageStep } from './stage-protocol.js';

/**
 * A micro-batch: a run of the pass's rows, where its tokens start among the pass's, and what a stage is sent (a row's
 * adapter by name and identity: the stage holds its own layers' part).
 */
export interface MicroBatch {
  firstToken: number;
  tokens: number;
  wire: StageStep['rows'];
}

/**
 * The pass's rows in `count` contiguous runs of about equal tokens (a prefill chunk weighs what it feeds), none
 * empty: each micro-batch a stage computes costs about the same.
 */
export function microBatches(rows: readonly KernelRow[], count: number): MicroBatch[] {
  const total = rows.reduce((n, r) => n + r.count, 0);
  const out: MicroBatch[] = [];
  let token = 0;
  let r = 0;
  for (let g = 0; g < count; g++) {
    const first = r;
    const target = ((g + 1) * total) / count;
    const firstToken = token;
    // Take rows while the run is short of its share, leaving a row for every run after it.
    while (r < rows.length - (count - g - 1) && (r === first || token + rows[r].count / 2 <= target))
      token += rows[r++].count;
    if (g === count - 1) while (r < rows.length) token += rows[r++].count;
    out.push({
      firstToken,
      tokens: token - firstToken,
      wire: rows.slice(first, r).map(({ blocks, start, count: n, variant }) => ({
        blocks: [...blocks],
        start,
        count: n,
        ...namedAdapter(variant),
      })),
    });
  }
  return out;
}

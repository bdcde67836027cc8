import type { StepRow } from '../../model-runner.js';
import { TOKEN_WORDS } from './wgsl-ops.js';

/** One pass's layout on the host side: where each row's tokens and logits lie, and the data the device needs. */
export interface StepInputs {
  /** Tokens of all rows, end to end (M), and logit rows (L). */
  tokens: number;
  logitRows: number;
  counts: number[];
  firstToken: number[];
  /** Per row, how many of its last positions get logits, and where the first of them is among the L rows. */
  want: number[];
  logitStart: number[];
  tableEntries: number;
  /** Per token: id, position, where its row's block table starts (TOKEN_WORDS each). */
  tok: Uint32Array<ArrayBuffer>;
  tables: Uint32Array<ArrayBuffer>;
  /** The LM head's rows: token index of each logit row. */
  rowmap: Uint32Array<ArrayBuffer>;
}

/** Lays out a pass's rows; token ids outside the vocabulary are refused (as the kernels refuse them). */
export function stepInputs(rows: readonly StepRow[], vocabSize: number): StepInputs {
  const counts = rows.map((r) => r.tokens.length);
  const want = rows.map((r, i) => Math.min(counts[i], Math.max(1, r.logits ?? 1)));
  const firstToken = offsets(counts);
  const logitStart = offsets(want);
  const tableStart = offsets(rows.map((r) => r.kv.blocks.length));
  const tokens = counts.reduce((a, b) => a + b, 0);
  const logitRows = want.reduce((a, b) => a + b, 0);
  const tableEntries = rows.reduce((n, r) => n + r.kv.blocks.length, 0);
  const tok = new Uint32Array(tokens * TOKEN_WORDS);
  const tables = new Uint32Array(Math.max(1, tableEntries));
  const rowmap = new Uint32Array(logitRows);
  for (const [r, { kv, tokens: ids }] of rows.entries()) {
    tables.set(kv.blocks, tableStart[r]);
    for (const [i, id] of ids.entries()) {
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize)
        throw new RangeError(`token id ${id} is outside the vocabulary (${vocabSize})`);
      tok.set([id, kv.length + i, tableStart[r]], (firstToken[r] + i) * TOKEN_WORDS);
    }
    for (let i = 0; i < want[r]; i++) rowmap[logitStart[r] + i] = firstToken[r] + counts[r] - want[r] + i;
  }
  return { tokens, logitRows, counts, firstToken, want, logitStart, tableEntries, tok, tables, rowmap };
}

/**
 * RoPE's cos and sin of every token's position, (M, head_dim): per token its head_dim / 2 cosines, then its
 * sines. Float64 angles rounded once, as the kernels' tables are (kernel-runner.ts), so both runners rotate
 * by the same float32 values.
 */
export function ropeTable(inputs: StepInputs, invFreq: Float32Array): Float32Array<ArrayBuffer> {
  const half = invFreq.length;
  const out = new Float32Array(inputs.tokens * 2 * half);
  for (let t = 0; t < inputs.tokens; t++) {
    const pos = inputs.tok[t * TOKEN_WORDS + 1];
    for (let j = 0; j < half; j++) {
      out[2 * t * half + j] = Math.cos(pos * invFreq[j]);
      out[(2 * t + 1) * half + j] = Math.sin(pos * invFreq[j]);
    }
  }
  return out;
}

function offsets(sizes: readonly number[]): number[] {
  const out: number[] = [];
  let total = 0;
  for (const n of sizes) {
    out.push(total);
    total += n;
  }
  return out;
}

import type { EngineLimits } from '../../defaults.js';
import { kvBytesPerToken, type ModelConfig } from '../../model/config.js';
import { vocabRows, type LayerSpan, type LlamaWeights } from './weights/llama-weights.js';

/** Tokens whose activations are in scratch at once: bounds scratch memory whatever the pass's size. */
export const CHUNK = 32;
/** Logit rows computed in a pass beyond one per row (speculative verifications): bounds the logits' scratch. */
export const LOGIT_ROWS = 8;
/**
 * Rows of logits a quantised output projection computes at a time, as they are read: matmul_q's row tile
 * (kernels/matmul_quant.c streams the weights once per 4 rows whatever M), so it costs nothing over one
 * call for every row, and the scratch holds 4 rows of vocabulary instead of a whole batch's (4.5 MiB at 16
 * rows and SmolLM2's 49,152). A float head keeps every row: its kernels stream the weights once per call.
 */
export const QUANT_LOGIT_CHUNK = 4;
/** Every scratch allocation starts on a 64-byte boundary (ScratchArena.alloc). */
const ALIGN = 64;
/** The kernels' own stack, below their heap (kernels/build.sh): counted with the scratch in the footprint. */
export const KERNELS_STACK = 131072;

/** What one pass lays out in scratch, by its size. */
export interface PassShape {
  /** Tokens of every row, end to end (M). */
  tokens: number;
  /** Block-table entries of every row. */
  tableEntries: number;
  /** The most (tokens x keys) one attention call of the pass scores, per head of a KV group. */
  scoreRow: number;
  /** Rows of logits a pass computes (each row's last position, and speculative verifications'). */
  logitRows: number;
}

/** Rows of logits computed at a time by `weights`' output projection (the scratch holds that many). */
export function logitChunkRows(weights: LlamaWeights | undefined, logitRows: number): number {
  return weights?.ends?.lmHead.kind === 'quant' ? Math.min(logitRows, QUANT_LOGIT_CHUNK) : logitRows;
}

/** The matrices' widths that size a layer's activations: the weights', or upper bounds before they are read. */
interface Widths {
  intermediate: number;
  /** The widest quantised input, padded to whole blocks (a block of 128 pads K = 64 to 128). */
  widestQuant: number;
}

/** Widths of loaded weights, found once: every pass lays out its scratch from them. */
const knownWidths = new WeakMap<LlamaWeights, Widths>();

function widths(config: ModelConfig, weights?: LlamaWeights): Widths {
  const known = weights && knownWidths.get(weights);
  if (known) return known;
  const { hiddenSize: H, numHeads, headDim } = config;
  // An upper bound for Llama shapes until the weights say (SmolLM2: 1536 = 2.7 H).
  const intermediate = weights?.intermediateSize ?? 4 * H;
  const quant = weights
    ? [
        ...(weights.ends ? [weights.ends.lmHead] : []),
        ...weights.layers.flatMap((l) => [l.q, l.k, l.v, l.o, l.gate, l.up, l.down]),
      ].map((m) => (m.kind === 'quant' ? m.blocks * 32 : 0))
    : [];
  const padded = Math.ceil(Math.max(H, intermediate, numHeads * headDim) / 32) * 32;
  const found = { intermediate, widestQuant: Math.max(padded, ...quant) };
  if (weights) knownWidths.set(weights, found);
  return found;
}

/**
 * One pass's scratch, in the order KernelRunner.forward allocates it: bytes of each buffer. Shapes:
 *   residual (M, hidden); cos, sin (M, head_dim / 2), and cosLocal, sinLocal for sliding layers; tables (block-table entries) int32;
 *   h, out (CHUNK, hidden); q, ctx (CHUNK, heads * head_dim); k, v (CHUNK, kv_heads * head_dim);
 *   gate, up (CHUNK, intermediate); xq (CHUNK, widest quantised input) int8 or int16 (by build);
 *   xs (CHUNK, widest / 32) its block scales; xsum (CHUNK, widest / 32, 2) int32 its half-block sums;
 *   scores (heads / kv_heads, score row); logits (logitChunkRows, vocab), which also takes any other
 *   position's logits on demand; lastRows (logit rows, hidden).
 */
export function passLayout(config: ModelConfig, pass: PassShape, weights?: LlamaWeights, span?: LayerSpan) {
  const { hiddenSize: H, numHeads, numKvHeads, headDim } = config;
  // A vocabulary stage's logits are its rows' only.
  const held = weights?.span ?? span;
  const { from, to } = held ? vocabRows(held, config.vocabSize) : { from: 0, to: config.vocabSize };
  const vocabSize = to - from;
  const { intermediate: I, widestQuant: widest } = widths(config, weights);
  const f = (n: number): number => Math.ceil(n / 4) * 4 * 4;
  return {
    residual: f(pass.tokens * H),
    cos: f(pass.tokens * (headDim / 2)),
    sin: f(pass.tokens * (headDim / 2)),
    // Sliding layers' RoPE at their own base (Gemma 3), where there are any.
    cosLocal: config.slidingWindow ? f(pass.tokens * (headDim / 2)) : 0,
    sinLocal: config.slidingWindow ? f(pass.tokens * (headDim / 2)) : 0,
    tables: 4 * pass.tableEntries,
    h: f(CHUNK * H),
    q: f(CHUNK * numHeads * headDim),
    k: f(CHUNK * numKvHeads * headDim),
    v: f(CHUNK * numKvHeads * headDim),
    ctx: f(CHUNK * numHeads * headDim),
    out: f(CHUNK * H),
    gate: f(CHUNK * I),
    up: f(CHUNK * I),
    xq: CHUNK * widest * 2,
    xs: f((CHUNK * widest) / 32),
    xsum: f((CHUNK * widest) / 16),
    scores: f((numHeads / numKvHeads) * pass.scoreRow),
    logits: f(logitChunkRows(weights, pass.logitRows) * vocabSize),
    lastRows: f(pass.logitRows * H),
  };
}

export type PassLayout = ReturnType<typeof passLayout>;

type PassLimits = Pick<EngineLimits, 'maxTokensPerStep' | 'maxBatchSize' | 'blockSize' | 'kvCacheBytes' | 'kvDtype'>;

/**
 * The largest pass the limits allow. No row is longer than the model's context nor than the KV pool holds
 * (the tokens kvCacheBytes holds at the pool's element type), which bounds attention's score rows.
 */
function largestPass(config: ModelConfig, limits: PassLimits, logits: boolean): PassShape {
  const rows = limits.maxBatchSize;
  const poolTokens = Math.floor(limits.kvCacheBytes / kvBytesPerToken(config, limits.kvDtype)) + limits.blockSize;
  const context = Math.min(config.maxPositionEmbeddings, poolTokens);
  return {
    tokens: limits.maxTokensPerStep,
    tableEntries: rows * (Math.ceil(context / limits.blockSize) + 1),
    scoreRow: CHUNK * (context + 8),
    logitRows: logits ? rows + LOGIT_ROWS : 0,
  };
}

/**
 * Scratch the largest pass the limits allow needs (forward()'s allocations, each aligned): what a model's
 * arena reserves, once however many engines share it. Before the weights are read (the budget's first check)
 * the layers' widths are upper bounds; with `weights`, exact. A stage that holds layers only (`span` without
 * ends) computes no logits.
 */
export function passScratchBytes(
  config: ModelConfig,
  limits: PassLimits,
  weights?: LlamaWeights,
  span?: LayerSpan,
): number {
  const logits = (weights?.span ?? span)?.ends ?? true;
  const layout = passLayout(config, largestPass(config, limits, logits), weights, span);
  return Object.values(layout).reduce((n, bytes) => n + Math.ceil(bytes / ALIGN) * ALIGN, 0);
}

/**
 * What the footprint adds to weights and KV pools for the kernels: the arena's scratch (passScratchBytes)
 * and the kernels' own stack, which lies below their heap (the memory holds it before anything is placed).
 */
export function scratchBytes(
  config: ModelConfig,
  limits: PassLimits,
  weights?: LlamaWeights,
  span?: LayerSpan,
): number {
  return passScratchBytes(config, limits, weights, span) + KERNELS_STACK;
}

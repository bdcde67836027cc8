import type { KvShape } from './block-pool.js';
import { KV_DTYPES, kvRowBytes, type KvDtype } from './kv-dtype.js';

/**
 * Where a block pool's bytes live. The pool is bookkeeping only (as vLLM's is); the runner that computes
 * with the keys and values provides their memory: JS arrays for onnxruntime, the kernels' linear memory,
 * GPU buffers, or the stages that hold a split model's layers. Block ids are the pool's, whichever it is.
 *
 * A block's stored form (readBlock, writeBlock, the durable block store): per layer, its keys then its
 * values, layer 0 first, each (kv_heads, blockSize) rows of the pool's dtype (kvRowBytes).
 */
export interface KvMemory {
  /** Bytes of one block in its stored form. */
  readonly blockBytes: number;
  /** Every layer's keys and values of block `from` into block `to` (copy-on-write); ordered before the next pass. */
  copyBlock(from: number, to: number): void;
  /** A copy of block `id`'s bytes. Asynchronous: a device or a stage sends them back. */
  readBlock(id: number): Promise<Uint8Array>;
  /** Overwrites block `id` with stored bytes (a restored block); seen by every later pass. */
  writeBlock(id: number, bytes: Uint8Array): void;
}

/** A move of block bytes the cache manager planned: a copy-on-write copy, or a restored block's stored bytes. */
export type KvTransfer =
  | { kind: 'copy'; from: number; to: number }
  | { kind: 'write'; block: number; bytes: Uint8Array };

/** Has `memory` execute the transfers a step planned, in order, before the pass that reads those blocks. */
export function applyKvTransfers(memory: KvMemory, transfers: readonly KvTransfer[]): void {
  for (const t of transfers) {
    if (t.kind === 'copy') memory.copyBlock(t.from, t.to);
    else memory.writeBlock(t.block, t.bytes);
  }
}

/** Bytes of one block's stored form. */
export function storedBlockBytes(shape: KvShape, blockSize: number, dtype: KvDtype): number {
  return 2 * shape.numLayers * shape.numKvHeads * blockSize * kvRowBytes(shape.headDim, dtype);
}

/**
 * Zeroes token positions `tokens` .. blockSize - 1 of a block's stored bytes: a partial block is stored
 * without whatever an earlier owner of its pool block left past its tokens.
 */
export function clearTokensFrom(bytes: Uint8Array, shape: KvShape, blockSize: number, tokens: number): void {
  const { numLayers, numKvHeads, headDim } = shape;
  const part = bytes.length / (2 * numLayers); // one layer's keys (or values) of the block
  const token = part / (numKvHeads * blockSize); // one (token, head) row
  if (!KV_DTYPES.some((dtype) => kvRowBytes(headDim, dtype) === token))
    throw new RangeError(`${bytes.length} bytes are not a stored KV block of this shape`);
  for (let at = 0; at < bytes.length; at += part)
    for (let h = 0; h < numKvHeads; h++)
      bytes.fill(0, at + (h * blockSize + tokens) * token, at + (h + 1) * blockSize * token);
}

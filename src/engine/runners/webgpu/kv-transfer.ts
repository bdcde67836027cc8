import { BufferUsage } from './usage.js';
import type { GpuKvPool } from './gpu-kv-pool.js';
import { grid, type WgslKernels } from './wgsl-kernels.js';

/**
 * Where one batch row's tokens sit: its block table, how many tokens it has stored, and the window of
 * the model's padded time axis it owns (the same numbers the CPU runner passes to gather / scatter).
 */
export interface KvRowPlacement {
  /** The sequence's block ids, in token order. */
  blocks: readonly number[];
  /** Tokens stored (gather reads these; scatter writes after them). */
  length: number;
  /** Gather: slot of the first stored token. Scatter: slot of the first new token. */
  offset: number;
  /** Scatter: new tokens to store (0 for gather). */
  count: number;
}

/** One layer's keys and values as device buffers of shape (rows, kv_heads, slots, head_dim). */
export interface KvLayerBuffers {
  keys: GPUBuffer;
  values: GPUBuffer;
}

const UNIFORM = BufferUsage.UNIFORM;
const STORAGE = BufferUsage.STORAGE;

/**
 * Encodes gathers (pool -> past) and scatters (present -> pool) of every layer with our kernels
 * (shaders/kv-gather.wgsl, kv-scatter.wgsl). The per-row metadata is uploaded once per call and shared
 * by the layers; its buffers are destroyed by `release()` after the work is submitted.
 */
export class KvTransfer {
  private readonly transient: GPUBuffer[] = [];

  constructor(
    private readonly kernels: WgslKernels,
    private readonly pool: GpuKvPool,
  ) {}

  /** pool -> past_key_values of each layer: (rows, kv_heads, slots, head_dim), zeros outside each row's window. */
  encodeGather(
    encoder: GPUCommandEncoder,
    rows: readonly KvRowPlacement[],
    slots: number,
    past: readonly KvLayerBuffers[],
  ): void {
    this.encode(encoder, 'kv-gather', rows, slots, slots, (layer) => [
      this.pool.keys[layer],
      this.pool.values[layer],
      past[layer].keys,
      past[layer].values,
    ]);
  }

  /** present of each layer ((rows, kv_heads, slots, head_dim)) -> the rows' blocks at positions [length, length + count). */
  encodeScatter(
    encoder: GPUCommandEncoder,
    rows: readonly KvRowPlacement[],
    slots: number,
    present: readonly KvLayerBuffers[],
  ): void {
    const maxCount = Math.max(0, ...rows.map((r) => r.count));
    if (maxCount === 0) return;
    this.encode(encoder, 'kv-scatter', rows, slots, maxCount, (layer) => [
      present[layer].keys,
      present[layer].values,
      this.pool.keys[layer],
      this.pool.values[layer],
    ]);
  }

  /** Frees the metadata buffers of the calls so far; call after submitting the encoders. */
  release(): void {
    for (const b of this.transient.splice(0)) b.destroy();
  }

  private encode(
    encoder: GPUCommandEncoder,
    kernel: 'kv-gather' | 'kv-scatter',
    rows: readonly KvRowPlacement[],
    slots: number,
    span: number,
    layerBuffers: (layer: number) => GPUBuffer[],
  ): void {
    const { numKvHeads, headDim, numLayers } = this.pool.shape;
    const total = rows.length * numKvHeads * span * headDim;
    if (total === 0) return;
    const { x, y } = grid(total);
    // Params: rows, slots, kv_heads, head_dim, block_size, total, grid_x, max_count (span for scatter).
    const params = new Uint32Array([rows.length, slots, numKvHeads, headDim, this.pool.blockSize, total, x, span]);
    const rowInfo = new Uint32Array(rows.length * 4); // (rows) { length, offset, count, table_start }
    const tables: number[] = [];
    rows.forEach((r, i) => {
      rowInfo.set([r.length, r.offset, r.count, tables.length], i * 4);
      tables.push(...r.blocks);
    });
    const k = this.kernels;
    const paramsBuffer = k.upload(params, UNIFORM, `${kernel} params`);
    const rowsBuffer = k.upload(rowInfo, STORAGE, `${kernel} rows`);
    const tablesBuffer = k.upload(new Uint32Array(tables.length ? tables : [0]), STORAGE, `${kernel} tables`);
    this.transient.push(paramsBuffer, rowsBuffer, tablesBuffer);
    const layers = Array.from({ length: numLayers }, (_, layer) => ({
      buffers: [paramsBuffer, rowsBuffer, tablesBuffer, ...layerBuffers(layer)],
      x,
      y,
    }));
    k.encode(encoder, kernel, layers);
  }
}

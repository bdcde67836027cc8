import { BufferUsage, MAP_MODE_READ } from './usage.js';
import type { KvShape } from '../../kv/block-pool.js';
import { storedBlockBytes, type KvMemory } from '../../kv/kv-memory.js';

/**
 * The block pool's memory on the device: per layer, keys and values each (num_blocks, kv_heads,
 * block_size, head_dim) float32 (or float16 for the WGSL pass), the layout ArrayKvMemory has on the CPU. The BlockPool keeps the
 * bookkeeping (reference counts, prefix hashes, free list); this holds the bytes, so a GPU engine's
 * keys and values never leave the device between steps. Copy-on-write copies wait for the next pass,
 * which encodes them ahead of its gather (encodePendingCopies).
 */
export class GpuKvPool implements KvMemory {
  readonly keys: GPUBuffer[];
  readonly values: GPUBuffer[];
  /** One block's bytes: WebGPU cannot copy within one buffer, so a block copy goes through here. */
  private readonly scratch: GPUBuffer;
  private pendingCopies: [number, number][] = [];

  constructor(
    readonly device: GPUDevice,
    readonly shape: KvShape,
    readonly numBlocks: number,
    readonly blockSize: number,
    readonly dtype: 'fp32' | 'fp16' = 'fp32',
  ) {
    const bytes = numBlocks * this.strideBytes;
    const max = device.limits.maxStorageBufferBindingSize;
    if (bytes > max)
      throw new RangeError(
        `a KV layer of ${bytes} bytes exceeds the device's ${max}-byte storage binding limit; use a smaller kvCacheBytes`,
      );
    const usage = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;
    const make = (kind: string, layer: number) =>
      device.createBuffer({ label: `kv ${kind} layer ${layer}`, size: Math.max(16, bytes), usage });
    this.keys = Array.from({ length: shape.numLayers }, (_, layer) => make('keys', layer));
    this.values = Array.from({ length: shape.numLayers }, (_, layer) => make('values', layer));
    this.scratch = device.createBuffer({
      label: 'kv block scratch',
      size: this.strideBytes,
      usage: BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
    });
  }

  /** Floats between consecutive blocks (kv_heads * block_size * head_dim). */
  get blockStride(): number {
    return this.shape.numKvHeads * this.blockSize * this.shape.headDim;
  }

  /** Bytes between consecutive blocks of one layer's keys (or values). */
  get strideBytes(): number {
    return this.blockStride * (this.dtype === 'fp16' ? 2 : 4);
  }

  get blockBytes(): number {
    return storedBlockBytes(this.shape, this.blockSize, this.dtype);
  }

  /** Copy-on-write: done on the device at the start of the next pass (the only reader or writer of KV bytes). */
  copyBlock(from: number, to: number): void {
    this.pendingCopies.push([from, to]);
  }

  /** The copies waiting since the last pass, into `encoder`: every layer's keys and values of `from` into `to`. */
  encodePendingCopies(encoder: GPUCommandEncoder): void {
    const n = this.strideBytes;
    for (const [from, to] of this.pendingCopies.splice(0)) {
      for (const buffer of [...this.keys, ...this.values]) {
        encoder.copyBufferToBuffer(buffer, from * n, this.scratch, 0, n);
        encoder.copyBufferToBuffer(this.scratch, 0, buffer, to * n, n);
      }
    }
  }

  /**
   * Block `id`'s bytes in their stored form (per layer, keys then values), read back from the
   * device: every layer copied in one submission, so the bytes are the block as it was at this call.
   */
  async readBlock(id: number): Promise<Uint8Array> {
    const n = this.strideBytes;
    const buffers = this.blockOrder;
    const staging = this.device.createBuffer({
      label: 'kv block read',
      size: buffers.length * n,
      usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
    });
    try {
      const encoder = this.device.createCommandEncoder();
      for (const [i, buffer] of buffers.entries()) encoder.copyBufferToBuffer(buffer, id * n, staging, i * n, n);
      this.device.queue.submit([encoder.finish()]);
      await staging.mapAsync(MAP_MODE_READ);
      return new Uint8Array(staging.getMappedRange().slice(0));
    } finally {
      staging.destroy();
    }
  }

  /** Writes bytes in that layout into block `id` (queued before any later pass). */
  writeBlock(id: number, bytes: Uint8Array): void {
    if (bytes.length !== this.blockBytes)
      throw new RangeError(`a KV block holds ${this.blockBytes} bytes, got ${bytes.length}`);
    // A copy-on-write copy still waiting for the next pass would land on top of the restored bytes: its
    // target was freed since (its sequence preempted), or the block would not be free to restore into.
    this.pendingCopies = this.pendingCopies.filter(([, to]) => to !== id);
    const n = this.strideBytes;
    for (const [i, buffer] of this.blockOrder.entries())
      this.device.queue.writeBuffer(buffer, id * n, bytes as Uint8Array<ArrayBuffer>, i * n, n);
  }

  /** The buffers in the order a stored block holds them: each layer's keys, then its values. */
  private get blockOrder(): GPUBuffer[] {
    return this.keys.flatMap((keys, layer) => [keys, this.values[layer]]);
  }

  destroy(): void {
    for (const b of [...this.keys, ...this.values, this.scratch]) b.destroy();
  }
}

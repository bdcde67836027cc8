import type { KvShape } from '../kv/block-pool.js';
import { kvRowBytes, type KvDtype } from '../kv/kv-dtype.js';
import { storedBlockBytes, type KvMemory } from '../kv/kv-memory.js';

/**
 * Float32 elements; float16 bits where a runner computes with a half-precision pool (KV_DTYPE fp16); the
 * bytes of 8-bit rows, each head_dim int8 and its float32 scale (KV_DTYPE int8).
 */
export type KvArray = Float32Array | Uint16Array | Int8Array;

/** A sequence's place in the pool, as a runner reads it: its block table and how many tokens it has stored. */
export interface BlockTable {
  readonly blocks: readonly number[];
  readonly length: number;
}

/**
 * KV memory as one array per layer for keys and one for values, each (numBlocks, kv_heads, blockSize,
 * row), a row being one (token, head)'s head_dim values in `dtype`, so one head's run of tokens inside a
 * block is contiguous and a gather copies one run per (block, head). Plain float32 JS arrays for
 * onnxruntime; views into linear memory for the kernels, which replace them (`keys[layer] = ...`) when the
 * memory grows.
 */
export class ArrayKvMemory implements KvMemory {
  readonly keys: KvArray[];
  readonly values: KvArray[];

  constructor(
    readonly shape: KvShape,
    readonly numBlocks: number,
    readonly blockSize: number,
    readonly dtype: KvDtype = 'fp32',
    arrays?: { keys: KvArray[]; values: KvArray[] },
  ) {
    if (!arrays && dtype !== 'fp32') throw new Error(`an ArrayKvMemory of ${dtype} is given its arrays`);
    const floats = numBlocks * shape.numKvHeads * blockSize * shape.headDim;
    this.keys = arrays?.keys ?? Array.from({ length: shape.numLayers }, () => new Float32Array(floats));
    this.values = arrays?.values ?? Array.from({ length: shape.numLayers }, () => new Float32Array(floats));
  }

  /** Elements between consecutive heads of one block, and between consecutive blocks. */
  get headStride(): number {
    return (this.blockSize * kvRowBytes(this.shape.headDim, this.dtype)) / this.keys[0].BYTES_PER_ELEMENT;
  }

  get blockStride(): number {
    return this.shape.numKvHeads * this.headStride;
  }

  get blockBytes(): number {
    return storedBlockBytes(this.shape, this.blockSize, this.dtype);
  }

  copyBlock(from: number, to: number): void {
    const n = this.blockStride;
    for (let layer = 0; layer < this.shape.numLayers; layer++) {
      this.keys[layer].copyWithin(to * n, from * n, from * n + n);
      this.values[layer].copyWithin(to * n, from * n, from * n + n);
    }
  }

  async readBlock(id: number): Promise<Uint8Array> {
    return this.readBlockNow(id);
  }

  /** readBlock, for a caller that holds the memory itself (a stage answering the head). */
  readBlockNow(id: number): Uint8Array {
    const out = new Uint8Array(this.blockBytes);
    let at = 0;
    for (const part of this.blockParts(id)) {
      out.set(part, at);
      at += part.length;
    }
    return out;
  }

  writeBlock(id: number, bytes: Uint8Array): void {
    if (bytes.length !== this.blockBytes)
      throw new RangeError(`a KV block holds ${this.blockBytes} bytes, got ${bytes.length}`);
    let at = 0;
    for (const part of this.blockParts(id)) {
      part.set(bytes.subarray(at, at + part.length));
      at += part.length;
    }
  }

  /** Block `id`'s bytes in each layer's keys, then its values, layer 0 first: views, in the stored order. */
  private *blockParts(id: number): Generator<Uint8Array> {
    for (let layer = 0; layer < this.shape.numLayers; layer++) {
      for (const array of [this.keys[layer], this.values[layer]]) {
        const size = this.blockStride * array.BYTES_PER_ELEMENT;
        yield new Uint8Array(array.buffer, array.byteOffset + id * size, size);
      }
    }
  }

  /**
   * For runners that feed an ONNX graph a batch of past_key_values (onnxruntime): copies the `length`
   * stored tokens of `layer` into slots [slotOffset, slotOffset + length) of one batch row's buffers,
   * (kv_heads, slots, head_dim) float32. The kernels read the blocks in place instead.
   */
  gather(
    kv: BlockTable,
    layer: number,
    keys: Float32Array,
    values: Float32Array,
    slots: number,
    slotOffset: number,
  ): void {
    const { blockSize, headStride, blockStride } = this;
    const { numKvHeads, headDim } = this.shape;
    const poolKeys = this.keys[layer];
    const poolValues = this.values[layer];
    for (let i = 0; i * blockSize < kv.length; i++) {
      const n = Math.min(blockSize, kv.length - i * blockSize) * headDim;
      for (let h = 0; h < numKvHeads; h++) {
        const src = kv.blocks[i] * blockStride + h * headStride;
        const dst = (h * slots + slotOffset + i * blockSize) * headDim;
        keys.set(poolKeys.subarray(src, src + n), dst);
        values.set(poolValues.subarray(src, src + n), dst);
      }
    }
  }

  /**
   * The other way (onnxruntime's `present` outputs): stores `count` new tokens of `layer` from slots
   * [slotOffset, slotOffset + count) of one batch row's buffers at positions [length, length + count).
   * The caller has checked the blocks are the sequence's own (PagedSequenceKv.checkWritable).
   */
  scatter(
    kv: BlockTable,
    layer: number,
    keys: Float32Array,
    values: Float32Array,
    slots: number,
    slotOffset: number,
    count: number,
  ): void {
    const { blockSize, headStride, blockStride } = this;
    const { numKvHeads, headDim } = this.shape;
    const poolKeys = this.keys[layer];
    const poolValues = this.values[layer];
    for (let done = 0; done < count; ) {
      const pos = kv.length + done;
      const block = kv.blocks[Math.floor(pos / blockSize)];
      const offset = pos % blockSize;
      const n = Math.min(blockSize - offset, count - done);
      for (let h = 0; h < numKvHeads; h++) {
        const src = (h * slots + slotOffset + done) * headDim;
        const dst = block * blockStride + h * headStride + offset * headDim;
        poolKeys.set(keys.subarray(src, src + n * headDim), dst);
        poolValues.set(values.subarray(src, src + n * headDim), dst);
      }
      done += n;
    }
  }
}

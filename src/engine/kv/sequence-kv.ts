/**
 * One sequence's keys and values as the model runner sees them: a store it can gather the past from
 * and scatter new tokens into. The contiguous cache and the paged cache both implement it, so the
 * runner never knows how the memory is laid out.
 *
 * The runner's buffers are one batch row of an ONNX KV tensor: (kv_heads, slots, head_dim) floats,
 * where `slots` is the padded time length of the whole batch and this sequence owns a window of it.
 */
export interface SequenceKv {
  /** Tokens whose keys and values are stored. */
  readonly length: number;
  /** Copies the `length` stored tokens of `layer` into slots [slotOffset, slotOffset + length) of the row buffers. */
  gather(layer: number, keys: Float32Array, values: Float32Array, slots: number, slotOffset: number): void;
  /**
   * Stores `count` new tokens of `layer`, read from slots [slotOffset, slotOffset + count) of the row
   * buffers, at token positions [length, length + count). Takes effect for readers after `advance`.
   */
  scatter(
    layer: number,
    keys: Float32Array,
    values: Float32Array,
    slots: number,
    slotOffset: number,
    count: number,
  ): void;
  /** Marks `count` scattered tokens (in every layer) as stored. */
  advance(count: number): void;
}

/** Shape of one layer's cached keys (or values) for one token: kv_heads vectors of head_dim floats. */
export interface KvShape {
  numLayers: number;
  numKvHeads: number;
  headDim: number;
}

/**
 * Element type of the KV pool (KV_DTYPE): float32; float16 (half the bytes); or int8, each (token, KV head)
 * row of head_dim values in 8 bits with one float32 scale (llama.cpp's q8_0 with the row as its block): a
 * little over a quarter of float32's bytes. fp16 and int8 exist on the edge kernels only.
 */
export const KV_DTYPES = ['fp32', 'fp16', 'int8'] as const;
export type KvDtype = (typeof KV_DTYPES)[number];

export function isKvDtype(value: unknown): value is KvDtype {
  return typeof value === 'string' && (KV_DTYPES as readonly string[]).includes(value);
}

/** Bytes of one (token, KV head) row of keys (or values): head_dim elements, and an 8-bit row's scale after them. */
export function kvRowBytes(headDim: number, dtype: KvDtype): number {
  return dtype === 'int8' ? headDim + 4 : headDim * (dtype === 'fp16' ? 2 : 4);
}

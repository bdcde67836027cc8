// ggml's tensor types as GGUF stores them (ggml.h's enum ggml_type, ggml-common.h's block structs). A
// quantised type packs `blockElements` consecutive values of a row (along ne0) into `blockBytes` bytes, so a
// row of ne0 values takes ne0 / blockElements blocks and ne0 must be a multiple of the block.

/** Ids of the types whose layout we know. */
export const GGML_TYPE = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  BF16: 30,
} as const;

export type GgmlTypeName = keyof typeof GGML_TYPE;
export type GgmlType = (typeof GGML_TYPE)[GgmlTypeName];

/** Elements of a K-quant super-block. */
export const QK_K = 256;

/** [elements per block, bytes per block] of each known type (sizes from ggml-common.h's static_asserts). */
const LAYOUT: Record<GgmlTypeName, readonly [number, number]> = {
  F32: [1, 4],
  F16: [1, 2],
  BF16: [1, 2],
  Q4_0: [32, 2 + 16], // d, 32 nibbles
  Q4_1: [32, 2 + 2 + 16], // d, m, 32 nibbles
  Q5_0: [32, 2 + 4 + 16], // d, 32 fifth bits, 32 nibbles
  Q5_1: [32, 2 + 2 + 4 + 16], // d, m, fifth bits, nibbles
  Q8_0: [32, 2 + 32], // d, 32 int8
  Q8_1: [32, 2 + 2 + 32], // d, d * sum(q), 32 int8
  Q2_K: [QK_K, 16 + 64 + 2 + 2], // 4-bit scales and mins, 2-bit quants, d, dmin
  Q3_K: [QK_K, 32 + 64 + 12 + 2], // high bits, low 2 bits, 6-bit scales, d
  Q4_K: [QK_K, 2 + 2 + 12 + 128], // d, dmin, 6-bit scales and mins of 8 sub-blocks, nibbles
  Q5_K: [QK_K, 2 + 2 + 12 + 32 + 128], // as Q4_K plus one high bit per value
  Q6_K: [QK_K, 128 + 64 + 16 + 2], // low nibbles, high 2 bits, int8 scales of 16 sub-blocks, d
  Q8_K: [QK_K, 4 + 256 + 32], // f32 d, int8 quants, int16 sums of 16
};

/**
 * Names of the other ids ggml has used, so an error can say what a file holds. 4, 5 and 31-33, 36-38 were
 * removed from ggml; their files no longer load in llama.cpp either.
 */
const OTHER_NAMES: Record<number, string> = {
  4: 'Q4_2 (removed from ggml)',
  5: 'Q4_3 (removed from ggml)',
  16: 'IQ2_XXS',
  17: 'IQ2_XS',
  18: 'IQ3_XXS',
  19: 'IQ1_S',
  20: 'IQ4_NL',
  21: 'IQ3_S',
  22: 'IQ2_S',
  23: 'IQ4_XS',
  24: 'I8',
  25: 'I16',
  26: 'I32',
  27: 'I64',
  28: 'F64',
  29: 'IQ1_M',
  31: 'Q4_0_4_4 (removed from ggml)',
  32: 'Q4_0_4_8 (removed from ggml)',
  33: 'Q4_0_8_8 (removed from ggml)',
  34: 'TQ1_0',
  35: 'TQ2_0',
  36: 'IQ4_NL_4_4 (removed from ggml)',
  37: 'IQ4_NL_4_8 (removed from ggml)',
  38: 'IQ4_NL_8_8 (removed from ggml)',
  39: 'MXFP4',
  40: 'NVFP4',
  41: 'Q1_0',
  42: 'Q2_0',
};

const NAME_OF = new Map<number, GgmlTypeName>(
  Object.entries(GGML_TYPE).map(([name, id]) => [id, name as GgmlTypeName]),
);

/** A type's name for messages: `Q4_K`, `IQ2_XXS`, or `unknown type 99`. */
export function ggmlTypeName(type: number): string {
  return NAME_OF.get(type) ?? OTHER_NAMES[type] ?? `unknown type ${type}`;
}

export function isKnownGgmlType(type: number): type is GgmlType {
  return NAME_OF.has(type);
}

export interface GgmlLayout {
  name: GgmlTypeName;
  /** Values per block along a row (1 for F32 / F16 / BF16). */
  blockElements: number;
  blockBytes: number;
}

/** Block layout of a type; throws naming the type when we do not know its layout. */
export function ggmlLayout(type: number): GgmlLayout {
  const name = NAME_OF.get(type);
  if (!name)
    throw new Error(`ggml type ${ggmlTypeName(type)} is not supported (known: ${Object.keys(GGML_TYPE).join(', ')})`);
  const [blockElements, blockBytes] = LAYOUT[name];
  return { name, blockElements, blockBytes };
}

/** Bytes of one row of `n` values; throws when n is not a whole number of blocks. */
export function ggmlRowBytes(type: number, n: number): number {
  const { name, blockElements, blockBytes } = ggmlLayout(type);
  if (!Number.isSafeInteger(n) || n < 0 || n % blockElements)
    throw new Error(`a ${name} row holds whole blocks of ${blockElements} values, not ${n}`);
  return (n / blockElements) * blockBytes;
}

/** Bytes of a tensor of dims `ne` (fastest first): rows of ne[0] values, ne[1] * ne[2] * ... of them. */
export function ggmlTensorBytes(type: number, ne: readonly number[]): number {
  if (ne.length === 0) throw new Error('a tensor has at least one dimension');
  let rows = 1;
  for (let i = 1; i < ne.length; i++) rows *= ne[i];
  const bytes = ggmlRowBytes(type, ne[0]) * rows;
  if (!Number.isSafeInteger(bytes)) throw new Error(`a tensor of dims [${ne.join(', ')}] is too large`);
  return bytes;
}

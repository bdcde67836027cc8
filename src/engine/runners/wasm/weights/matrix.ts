import type { LinearMemory } from '../linear-memory.js';
import type { KernelExports } from '../edge-kernels.js';

/**
 * Block-quantised forms the kernels multiply (kernels/quant.h has the layouts): a value plane of 4, 5, 6
 * or 8 bits per weight in blocks of 32 along K, and side information per block (scale and zero point,
 * scale and min, or ggml's K-quant sub-scales under a superblock scale).
 */
export const QUANT_FORMATS = ['v4-zp', 'v4-min', 'v4-kmin', 'v5-zp', 'v5-min', 'v5-kmin', 'v6-k16', 'v8-zp'] as const;
export type QuantFormat = (typeof QUANT_FORMATS)[number];

/** Where each plane of a quantised matrix lies (0: absent). */
export interface QuantPlanes {
  q: number;
  hi: number;
  s: number;
  m: number;
  z: number;
  sc: number;
  mn: number;
}

/**
 * A weight matrix as the kernels read it, at byte offsets in linear memory. K is the input width, N the
 * output width (for an embedding: hidden and vocab).
 *   dense: float32, float16 or bfloat16; `kn` = MatMul's (K, N), `nk` = (N, K) (Hugging Face's and
 *          ggml's layout, and an embedding's);
 *   quant: one of QUANT_FORMATS; `header` is the qmat struct matmul_q takes.
 */
export type Matrix =
  | { kind: 'dense'; dtype: 'f32' | 'f16' | 'bf16'; layout: 'kn' | 'nk'; ptr: number; k: number; n: number }
  | QuantMatrix;

export interface QuantMatrix {
  kind: 'quant';
  format: QuantFormat;
  k: number;
  n: number;
  /** Blocks of 32 along K (K padded up). */
  blocks: number;
  planes: QuantPlanes;
  header: number;
}

/**
 * Whether `format`'s value plane is interleaved by groups of 4 columns (kernels/quant.h): the 4-bit forms without
 * high bits, whose products then need no reduction across lanes. Written column by column like the others, then
 * interleaved once (interleaveV4).
 */
export function groupedV4(format: QuantFormat): boolean {
  return format === 'v4-zp' || format === 'v4-min' || format === 'v4-kmin';
}

/** A grouped V4 plane written column by column ((N, blocks, 16), room for whole groups) into the form the products read. */
export function interleaveV4(
  memory: LinearMemory,
  kernels: Pick<KernelExports, 'interleave_v4'>,
  q: number,
  n: number,
  blocks: number,
): void {
  const tmp = memory.alloc(blocks * 64);
  kernels.interleave_v4(q, n, blocks, tmp);
  memory.free(tmp);
}

/** Bytes of each plane of a quantised (N, blocks * 32) matrix; side arrays hold columns in groups of 4. */
export function quantPlaneBytes(format: QuantFormat, n: number, blocks: number, zpPerBlock: boolean): QuantPlanes {
  const cells = n * blocks;
  const side = Math.ceil(n / 4) * 4 * blocks;
  const superSide = Math.ceil(n / 4) * 4 * Math.ceil(blocks / 8);
  const bits = format.slice(0, 2);
  const form = format.slice(3);
  return {
    // A grouped V4 plane holds whole groups of 4 columns (a tail's spare columns zeros).
    q: bits === 'v8' ? cells * 32 : groupedV4(format) ? side * 16 : cells * 16,
    hi: bits === 'v5' ? cells * 4 : bits === 'v6' ? cells * 8 : 0,
    s: 4 * (form === 'kmin' || form === 'k16' ? superSide : side),
    m: form === 'min' ? 4 * side : form === 'kmin' ? 4 * superSide : 0,
    z: form === 'zp' && zpPerBlock ? side : 0,
    sc: form === 'kmin' ? side : form === 'k16' ? 2 * side : 0,
    mn: form === 'kmin' ? side : 0,
  };
}

/**
 * Room for a quantised (N, K) matrix: every plane allocated (side arrays zeroed, so a column group's
 * padding lanes compute zeros) and its qmat header written. `zpConst` is the zero point of a ZP form
 * without per-block ones (V8's in int8 terms, so 0 for symmetric int8).
 */
export function allocQuant(
  memory: LinearMemory,
  format: QuantFormat,
  k: number,
  n: number,
  options: { zpConst?: number; zpPerBlock?: boolean } = {},
): QuantMatrix {
  const blocks = Math.ceil(k / 32);
  const bytes = quantPlaneBytes(format, n, blocks, options.zpPerBlock === true);
  const planes = { q: 0, hi: 0, s: 0, m: 0, z: 0, sc: 0, mn: 0 };
  for (const key of Object.keys(planes) as (keyof QuantPlanes)[]) {
    if (bytes[key] === 0) continue;
    planes[key] = memory.alloc(bytes[key]);
    if (key !== 'q' && key !== 'hi') memory.u8(planes[key], bytes[key]).fill(0);
  }
  return {
    kind: 'quant',
    format,
    k,
    n,
    blocks,
    planes,
    header: writeQmat(memory, format, options.zpConst ?? 0, planes),
  };
}

/**
 * The qmat struct matmul_q reads (kernels/quant.h: nine int32, the format, the constant zero point, then the
 * planes' pointers q, hi, s, m, z, sc, mn), written here and nowhere else; returns its pointer.
 */
export function writeQmat(memory: LinearMemory, format: QuantFormat, zpConst: number, planes: QuantPlanes): number {
  const header = memory.alloc(36);
  memory
    .i32(header, 9)
    .set([
      QUANT_FORMATS.indexOf(format),
      zpConst,
      planes.q,
      planes.hi,
      planes.s,
      planes.m,
      planes.z,
      planes.sc,
      planes.mn,
    ]);
  return header;
}

/** Index of (column, block) in a side array: column group, block, lane. */
export function sideIndex(col: number, blocks: number, block: number): number {
  return (Math.floor(col / 4) * blocks + block) * 4 + (col % 4);
}

/** Bytes a matrix holds in linear memory. */
export function matrixBytes(m: Matrix): number {
  if (m.kind === 'dense') return m.k * m.n * (m.dtype === 'f32' ? 4 : 2);
  const b = quantPlaneBytes(m.format, m.n, m.blocks, m.planes.z !== 0);
  return b.q + b.hi + b.s + b.m + b.z + b.sc + b.mn;
}

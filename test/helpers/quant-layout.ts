// Quantised matrices for the kernel tests: random logical values per form (kernels/quant.h), laid out in
// the documented planes by a writer independent of the loaders, and the quantize_rows + matmul_q product.
import type { KernelExports } from '../../src/engine/runners/wasm/edge-kernels.js';
import type { LinearMemory } from '../../src/engine/runners/wasm/linear-memory.js';
import {
  allocQuant,
  groupedV4,
  QUANT_FORMATS,
  sideIndex,
  type QuantFormat,
  type QuantMatrix,
} from '../../src/engine/runners/wasm/weights/matrix.js';
import { mulberry32 } from './prng.js';

export interface Kernels {
  k: KernelExports;
  mem: LinearMemory;
}
/** A quantised matrix as numbers: u (N, K) and its side information per block. */
export interface Logical {
  format: QuantFormat;
  k: number;
  n: number;
  blocks: number;
  u: Uint8Array;
  s: Float32Array; // per (n, block), or d per (n, superblock) for K forms
  m: Float32Array; // MIN: per block; KMIN: dmin per superblock
  z: Uint8Array | undefined; // ZP per block (V8: int8 bytes), or undefined: the constant
  zpConst: number;
  sc: Int8Array; // KMIN: per block (0..63); K16: two per block
  mn: Uint8Array;
}

export const maxU = (f: QuantFormat): number =>
  f.startsWith('v8') ? 255 : f.startsWith('v6') ? 63 : f.startsWith('v5') ? 31 : 15;

export function randomLogical(format: QuantFormat, k: number, n: number, seed: number, perBlockZp: boolean): Logical {
  const next = mulberry32(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  const blocks = Math.ceil(k / 32);
  const supers = Math.ceil(blocks / 8);
  const u = new Uint8Array(n * blocks * 32);
  for (let c = 0; c < n; c++) for (let i = 0; i < k; i++) u[c * blocks * 32 + i] = int(0, maxU(format));
  const half = (v: number) => Math.fround(v); // side values as a file would hold them
  const kForm = format.endsWith('kmin') || format.endsWith('k16');
  const s = Float32Array.from({ length: n * (kForm ? supers : blocks) }, () => half(0.001 + next() * 0.02));
  const m = Float32Array.from({ length: n * (kForm ? supers : blocks) }, () => half(next() * 0.05 - 0.01));
  const zp = format.startsWith('v8') ? 0 : format.startsWith('v5') ? 16 : 8;
  const z = perBlockZp
    ? Uint8Array.from({ length: n * blocks }, () =>
        format.startsWith('v8') ? int(-40, 40) & 0xff : int(0, maxU(format)),
      )
    : undefined;
  const sc = Int8Array.from({ length: n * blocks * 2 }, () => (format.endsWith('k16') ? int(-60, 60) : int(0, 63)));
  const mn = Uint8Array.from({ length: n * blocks }, () => int(0, 63));
  return { format, k, n, blocks, u, s, m, z, zpConst: zp, sc, mn };
}

/** Lays a logical matrix out in quant.h's planes, element by element from the documented layouts. */
export function place(kernels: Kernels, L: Logical): QuantMatrix {
  const { mem } = kernels;
  const m = allocQuant(mem, L.format, L.k, L.n, { zpConst: L.zpConst, zpPerBlock: L.z !== undefined });
  const bits = L.format.slice(0, 2);
  const kForm = L.format.endsWith('kmin') || L.format.endsWith('k16');
  const supers = Math.ceil(L.blocks / 8);
  for (let c = 0; c < L.n; c++)
    for (let b = 0; b < L.blocks; b++) {
      const cell = c * L.blocks + b;
      const u = (i: number) => L.u[cell * 32 + i];
      if (bits === 'v8') {
        const q = mem.u8(m.planes.q + cell * 32, 32);
        for (let i = 0; i < 32; i++) q[i] = u(i) ^ 0x80; // int8 q = u - 128
      } else {
        // Byte j of the block: element j low, j + 16 high; the 4-bit forms without high bits keep each group of 4
        // columns' blocks interleaved, T_k (16 bytes at 16 k) = the 4 columns' bytes 4k..4k+3.
        const at = (j: number) =>
          groupedV4(L.format)
            ? (Math.floor(c / 4) * L.blocks + b) * 64 + Math.floor(j / 4) * 16 + (c % 4) * 4 + (j % 4)
            : cell * 16 + j;
        const q = mem.u8(m.planes.q, at(15) + 1);
        for (let j = 0; j < 16; j++) q[at(j)] = (u(j) & 15) | ((u(j + 16) & 15) << 4);
        const planes = bits === 'v5' ? [4] : bits === 'v6' ? [4, 5] : [];
        planes.forEach((bit, p) => {
          const hi = mem.u8(m.planes.hi + cell * 4 * planes.length + 4 * p, 4);
          for (let i = 0; i < 32; i++) if ((u(i) >> bit) & 1) hi[i >> 3] |= 1 << (i & 7);
        });
      }
      const side = sideIndex(c, L.blocks, b);
      const superSide = (Math.floor(c / 4) * supers + Math.floor(b / 8)) * 4 + (c % 4);
      if (!kForm) mem.f32(m.planes.s, side + 1)[side] = L.s[cell];
      if (L.format.endsWith('-min')) mem.f32(m.planes.m, side + 1)[side] = L.m[cell];
      if (L.z) mem.u8(m.planes.z, side + 1)[side] = L.z[cell];
      if (kForm) mem.f32(m.planes.s, superSide + 1)[superSide] = L.s[c * supers + Math.floor(b / 8)];
      if (L.format.endsWith('kmin')) {
        mem.f32(m.planes.m, superSide + 1)[superSide] = L.m[c * supers + Math.floor(b / 8)];
        mem.u8(m.planes.sc, side + 1)[side] = L.sc[cell];
        mem.u8(m.planes.mn, side + 1)[side] = L.mn[cell];
      }
      if (L.format.endsWith('k16')) {
        const sc = mem.u8(m.planes.sc, 2 * side + 2);
        sc[2 * side] = L.sc[cell * 2] & 0xff;
        sc[2 * side + 1] = L.sc[cell * 2 + 1] & 0xff;
      }
    }
  return m;
}

/** Runs quantize_rows + matmul_q over rows of x; returns y (rows, n). */
export function product(kernels: Kernels, m: QuantMatrix, x: Float32Array, rows: number): Float32Array {
  const { k, mem } = kernels;
  const xp = mem.alloc(x.byteLength);
  mem.f32(xp, x.length).set(x);
  const xq = mem.alloc(rows * m.blocks * 32 * 2);
  const xs = mem.alloc(rows * m.blocks * 4);
  const xsum = mem.alloc(rows * m.blocks * 8);
  const y = mem.alloc(rows * m.n * 4);
  k.quantize_rows(xq, xs, xsum, xp, rows, m.k, m.blocks);
  k.matmul_q(y, xq, xs, xsum, m.header, rows, m.blocks, m.n);
  return mem.f32(y, rows * m.n).slice();
}

export const gaussian = (seed: number, n: number): Float32Array => {
  const next = mulberry32(seed);
  return Float32Array.from({ length: n }, () => (next() + next() + next() - 1.5) * 2);
};

/** The rows of quantProbe's products, but for those under a key ending ', one row'. */
export const PROBE_ROWS = 7;

/**
 * The product in every form over fixed random inputs (7 rows, so tiles of 4, 2 and 1 rows, K 256, 30 columns;
 * zero points per block where the form has them): what the kernels must give, bit for bit, in every build and every engine that runs them.
 */
export function quantProbe(kernels: Kernels): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  // 7 rows: tiles of 4, 2 and 1; 30 columns: two 16-column single-row tiles (tile_row, in the forms stored by
  // column; 8 groups of 4 in the interleaved 4-bit ones), the second with a tail.
  // And a product of one row alone, which a build may run as its own function (the dot-add build's 8-bit one). The
  // zero-point forms with a zero point per block, and again with one for the whole matrix (Q8_0, q4's 8-bit head).
  const [rows, k, n] = [PROBE_ROWS, 256, 30];
  const x = gaussian(11, rows * k);
  for (const [i, format] of QUANT_FORMATS.entries()) {
    const m = place(kernels, randomLogical(format, k, n, 1000 + i, format.endsWith('-zp')));
    out[format] = Array.from(product(kernels, m, x, rows));
    out[`${format}, one row`] = Array.from(product(kernels, m, x.subarray(0, k), 1));
    if (format.endsWith('-zp')) {
      const one = place(kernels, randomLogical(format, k, n, 2000 + i, false));
      out[`${format}, one zero point`] = Array.from(product(kernels, one, x, rows));
    }
  }
  return out;
}

// The block-quantised product (kernels/matmul_quant.c) in every form it reads (kernels/quant.h), against a
// float64 computation from the logical values: each weight as its form defines it (s * (u - z), s * u - m,
// d * sc * u - dmin * mn, d * sc_h * (u - 32)), each activation as its block quantises it. The planes are laid
// out here by a writer of the documented layouts, independent of the loader's. Then the two builds
// (baseline and relaxed SIMD) must give the same bits, and a row's bits must not depend on its batch.
import { beforeAll, describe, expect, it } from 'vitest';
import { edgeKernelsModule, type KernelsBuild } from '../src/backends/edge-kernels-node.js';
import { instantiateKernels, type KernelExports, type LinearMemory } from '../src/engine/kernels/edge-kernels.js';
import {
  allocQuant,
  QUANT_FORMATS,
  sideIndex,
  type QuantFormat,
  type QuantMatrix,
} from '../src/engine/kernels/weights/matrix.js';
import { mulberry32 } from './helpers/prng.js';

interface Kernels {
  k: KernelExports;
  mem: LinearMemory;
}
const builds = new Map<KernelsBuild, Kernels>();
beforeAll(async () => {
  for (const build of ['baseline', 'relaxed'] as const) {
    const { kernels, memory } = await instantiateKernels(edgeKernelsModule(build));
    builds.set(build, { k: kernels, mem: memory });
  }
});

/** A quantised matrix as numbers: u (N, K) and its side information per block. */
interface Logical {
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

const maxU = (f: QuantFormat): number =>
  f.startsWith('v8') ? 255 : f.startsWith('v6') ? 63 : f.startsWith('v5') ? 31 : 15;

function randomLogical(format: QuantFormat, k: number, n: number, seed: number, perBlockZp: boolean): Logical {
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

/** The weight (n, i) the form defines, in float64. */
function weight(L: Logical, c: number, i: number): number {
  const b = Math.floor(i / 32);
  const u = L.u[c * L.blocks * 32 + i];
  const form = L.format.slice(3);
  const sup = c * Math.ceil(L.blocks / 8) + Math.floor(b / 8);
  if (form === 'zp') {
    const zRaw = L.z ? L.z[c * L.blocks + b] : L.zpConst;
    const z = L.format === 'v8-zp' ? ((zRaw << 24) >> 24) + 128 : zRaw; // V8: u = q + 128, z stored int8
    return L.s[c * L.blocks + b] * (u - z);
  }
  if (form === 'min') return L.s[c * L.blocks + b] * u - L.m[c * L.blocks + b];
  if (form === 'kmin') return L.s[sup] * L.sc[c * L.blocks + b] * u - L.m[sup] * L.mn[c * L.blocks + b];
  return L.s[sup] * L.sc[(c * L.blocks + b) * 2 + (i % 32 >= 16 ? 1 : 0)] * (u - 32);
}

/** Lays a logical matrix out in quant.h's planes, element by element from the documented layouts. */
function place(kernels: Kernels, L: Logical): QuantMatrix {
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
        const q = mem.u8(m.planes.q + cell * 16, 16);
        for (let j = 0; j < 16; j++) q[j] = (u(j) & 15) | ((u(j + 16) & 15) << 4);
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
function product(kernels: Kernels, m: QuantMatrix, x: Float32Array, rows: number): Float32Array {
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

/** x as its blocks of 32 quantise it (per row, absmax / 127): what the integer product multiplies. */
function quantizedActivations(x: Float32Array, rows: number, k: number): Float64Array {
  const out = new Float64Array(rows * k);
  for (let r = 0; r < rows; r++)
    for (let b = 0; b * 32 < k; b++) {
      let amax = 0;
      for (let i = b * 32; i < Math.min(k, b * 32 + 32); i++) amax = Math.max(amax, Math.abs(x[r * k + i]));
      const s = Math.fround(amax / 127);
      const inv = amax === 0 ? 0 : Math.fround(127 / amax);
      for (let i = b * 32; i < Math.min(k, b * 32 + 32); i++)
        out[r * k + i] = Math.round(Math.fround(x[r * k + i] * inv)) * s;
    }
  return out;
}

/** Round half to even, as f32x4.nearest does. */
const roundEven = (v: number): number => {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
};

const gaussian = (seed: number, n: number): Float32Array => {
  const next = mulberry32(seed);
  return Float32Array.from({ length: n }, () => (next() + next() + next() - 1.5) * 2);
};

describe('quantize_rows', () => {
  it('gives each block of 32 of a row its own absmax scale, the rounded values and the sums of each half', () => {
    for (const build of ['baseline', 'relaxed'] as const) {
      const { k, mem } = builds.get(build)!;
      const [rows, kk, blocks] = [2, 70, 3];
      const x = gaussian(7, rows * kk);
      const xp = mem.alloc(x.byteLength);
      mem.f32(xp, x.length).set(x);
      const xq = mem.alloc(rows * blocks * 64);
      const xs = mem.alloc(rows * blocks * 4);
      const xsum = mem.alloc(rows * blocks * 8);
      k.quantize_rows(xq, xs, xsum, xp, rows, kk, blocks);
      const values =
        build === 'relaxed'
          ? new Int8Array(mem.memory.buffer, xq, rows * blocks * 32)
          : new Int16Array(mem.memory.buffer, xq, rows * blocks * 32);
      const sums = mem.i32(xsum, rows * blocks * 2);
      const scales = mem.f32(xs, rows * blocks);
      for (let r = 0; r < rows; r++)
        for (let b = 0; b < blocks; b++) {
          const block = Array.from({ length: 32 }, (_, i) => (b * 32 + i < kk ? x[r * kk + b * 32 + i] : 0));
          const amax = Math.max(...block.map(Math.abs));
          expect(scales[r * blocks + b]).toBe(Math.fround(amax / 127));
          const want = block.map((v) => roundEven(Math.fround(v * Math.fround(127 / amax))) + 0); // + 0: no -0
          expect(Array.from(values.subarray((r * blocks + b) * 32, (r * blocks + b + 1) * 32))).toEqual(want);
          const half = (h: number) => want.slice(16 * h, 16 * h + 16).reduce((a, v) => a + v, 0);
          expect([sums[(r * blocks + b) * 2], sums[(r * blocks + b) * 2 + 1]]).toEqual([half(0), half(1)]);
        }
    }
  });
});

describe('matmul_q over every form', () => {
  const shapes: [number, number, number][] = [
    [1, 256, 7],
    [5, 512, 9],
    [9, 96, 4],
  ];
  for (const format of QUANT_FORMATS) {
    const kForm = format.endsWith('kmin') || format.endsWith('k16');
    for (const [rows, kk, n] of shapes) {
      if (kForm && kk % 256 !== 0) continue; // superblocks of 256
      for (const perBlockZp of format.endsWith('-zp') ? [false, true] : [false]) {
        it(`${format}${perBlockZp ? ' (zero point per block)' : ''} ${rows}x${kk}x${n}: the float64 product of the logical values; both builds, any batch, the same bits`, () => {
          const L = randomLogical(format, kk, n, rows * 131 + kk + n + (perBlockZp ? 7 : 0), perBlockZp);
          const x = gaussian(rows + kk, rows * kk);
          const xd = quantizedActivations(x, rows, kk);
          const results = (['baseline', 'relaxed'] as const).map((build) => {
            const kernels = builds.get(build)!;
            const m = place(kernels, L);
            const all = product(kernels, m, x, rows);
            // Each row alone: the same bits as in the batch.
            for (let r = 0; r < rows; r++)
              expect(Array.from(product(kernels, m, x.subarray(r * kk, (r + 1) * kk), 1))).toEqual(
                Array.from(all.subarray(r * n, (r + 1) * n)),
              );
            // dequantize_column gives the logical weights (float32 rounding of the formula).
            const out = kernels.mem.alloc(m.blocks * 128);
            kernels.k.dequantize_column(out, m.header, n - 1, m.blocks);
            const col = kernels.mem.f32(out, kk);
            // float32 rounding of s * u - m: relative to the column's scale, since the two terms can cancel.
            const scale = Math.max(...Array.from({ length: kk }, (_, i) => Math.abs(weight(L, n - 1, i))));
            for (let i = 0; i < kk; i++)
              expect(Math.abs(col[i] - weight(L, n - 1, i))).toBeLessThanOrEqual(scale * 2 ** -21);
            return all;
          });
          expect(Array.from(results[1])).toEqual(Array.from(results[0]));
          let err = 0;
          let norm = 0;
          for (let r = 0; r < rows; r++)
            for (let c = 0; c < n; c++) {
              let want = 0;
              for (let i = 0; i < kk; i++) want += xd[r * kk + i] * weight(L, c, i);
              err = Math.max(err, Math.abs(results[0][r * n + c] - want));
              norm = Math.max(norm, Math.abs(want));
            }
          expect(err / norm).toBeLessThan(2e-6);
        });
      }
    }
  }
});

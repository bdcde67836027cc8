// The block-quantised product (kernels/matmul_quant.c) in every form it reads (kernels/quant.h), against a
// float64 computation from the logical values: each weight as its form defines it (s * (u - z), s * u - m,
// d * sc * u - dmin * mn, d * sc_h * (u - 32)), each activation as its block quantises it. The planes are laid
// out here by a writer of the documented layouts, independent of the loader's. Then the builds (baseline SIMD,
// and relaxed SIMD's three forms) must give the same bits wherever each runs exactly (the dot-add build's 8-bit
// products past one row only where V8 fuses: exactUnder), and a row's bits must not depend on its batch.
import { beforeAll, describe, expect, it } from 'vitest';
import { edgeKernelsModule, KERNELS_BUILDS, type KernelsBuild } from '../src/backends/edge-kernels-node.js';
import { probeDotLowering } from '../src/engine/runners/wasm/dot-lowering.js';
import { instantiateKernels } from '../src/engine/runners/wasm/edge-kernels.js';
import { QUANT_FORMATS } from '../src/engine/runners/wasm/weights/matrix.js';
import { exactUnder } from './helpers/kernel-probe.js';
import { gaussian, type Kernels, type Logical, place, product, randomLogical } from './helpers/quant-layout.js';

const builds = new Map<KernelsBuild, Kernels>();
beforeAll(async () => {
  for (const build of KERNELS_BUILDS) {
    const { kernels, memory } = await instantiateKernels(edgeKernelsModule(build));
    builds.set(build, { k: kernels, mem: memory });
  }
});

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

describe('quantize_rows', () => {
  it('gives each block of 32 of a row its own absmax scale, the rounded values and the sums of each half', () => {
    for (const build of KERNELS_BUILDS) {
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
        build !== 'baseline'
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

  it('rounds ties to even, and keeps every value in [-127, 127] whatever the block holds', () => {
    // Block 0: its absmax is 127, so x / s is x itself: ties. Block 1: magnitudes so small that 127 / absmax
    // overflows to infinity (every x / s is then infinite). Block 2: a NaN (its scale is NaN, its values 0).
    const ties = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 127, -127];
    const tiny = [1e-39, -1e-39, 2e-40, -3e-40, 0];
    const x = new Float32Array(96);
    x.set(ties, 0);
    x.set(tiny, 32);
    x.set([1, Number.NaN, -2], 64);
    const want = [
      [0, 2, 2, 0, -2, -2, 126, -126, 127, -127],
      [127, -127, 127, -127, 0],
      [0, 0, 0],
    ];
    for (const build of KERNELS_BUILDS) {
      const { k, mem } = builds.get(build)!;
      const xp = mem.alloc(x.byteLength);
      mem.f32(xp, x.length).set(x);
      const xq = mem.alloc(3 * 64);
      const xs = mem.alloc(3 * 4);
      const xsum = mem.alloc(3 * 8);
      k.quantize_rows(xq, xs, xsum, xp, 1, 96, 3);
      const values =
        build !== 'baseline' ? new Int8Array(mem.memory.buffer, xq, 96) : new Int16Array(mem.memory.buffer, xq, 96);
      const sums = mem.i32(xsum, 6);
      for (const [b, w] of want.entries()) {
        const block = Array.from(values.subarray(32 * b, 32 * b + 32));
        expect(block, `${build}, block ${b}`).toEqual([...w, ...Array(32 - w.length).fill(0)]);
        expect(sums[2 * b] + sums[2 * b + 1], `${build}, block ${b}`).toBe(w.reduce((a, v) => a + v, 0));
      }
      expect(Number.isNaN(mem.f32(xs, 3)[2])).toBe(true);
    }
  });
});

describe('matmul_q over every form', () => {
  // The dot-add build's 8-bit products are exact only where V8 fuses its dot product (never Node 20's): there it
  // joins the comparison, and the last case below holds it to the others or to its lowering's wrong answer.
  const lowering = probeDotLowering(edgeKernelsModule('dot-add'));
  // Column counts past 16 reach the wide builds' 16-column single-row tile (tile_row: every form but the
  // interleaved 4-bit ones), whole and with a tail.
  const shapes: [number, number, number][] = [
    [1, 256, 7],
    [5, 512, 9],
    [9, 96, 4],
    [1, 256, 19],
    [3, 256, 30],
  ];
  for (const format of QUANT_FORMATS) {
    const kForm = format.endsWith('kmin') || format.endsWith('k16');
    for (const [rows, kk, n] of shapes) {
      if (kForm && kk % 256 !== 0) continue; // superblocks of 256
      for (const perBlockZp of format.endsWith('-zp') ? [false, true] : [false]) {
        it(`${format}${perBlockZp ? ' (zero point per block)' : ''} ${rows}x${kk}x${n}: the float64 product of the logical values; every build, any batch, the same bits`, () => {
          const L = randomLogical(format, kk, n, rows * 131 + kk + n + (perBlockZp ? 7 : 0), perBlockZp);
          const x = gaussian(rows + kk, rows * kk);
          const xd = quantizedActivations(x, rows, kk);
          const results = KERNELS_BUILDS.filter((build) => exactUnder(build, format, lowering, rows)).map((build) => {
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
          for (const other of results.slice(1)) expect(Array.from(other)).toEqual(Array.from(results[0]));
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

  it(`v8-zp on the dot-add build: the others' bits where V8 fuses its dot product, else not (here: ${lowering})`, () => {
    const L = randomLogical('v8-zp', 256, 19, 5, true);
    const x = gaussian(9, 3 * 256);
    const run = (build: KernelsBuild, rows = 3) => {
      const kernels = builds.get(build)!;
      return Array.from(product(kernels, place(kernels, L), x.subarray(0, rows * 256), rows));
    };
    if (lowering === 'fused-unsigned') expect(run('dot-add')).toEqual(run('baseline'));
    else expect(run('dot-add')).not.toEqual(run('baseline'));
    // One row alone takes the split path (q against the activation's 7-bit halves): exact under any lowering.
    expect(run('dot-add', 1)).toEqual(run('baseline', 1));
  });
});

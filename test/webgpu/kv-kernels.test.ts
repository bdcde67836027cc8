// shaders/kv-gather.wgsl and kv-scatter.wgsl against PagedSequenceKv's CPU gather / scatter on the
// same pool contents and block tables: bit-exact (compared as uint32 bit patterns), with odd shapes
// (3 KV heads, head_dim 5, blocks of 4 tokens), partial last blocks, scattered block tables, rows of
// different lengths in one batch, and NaN / -0 / denormal values that a float copy could alter.
import { beforeAll, describe, expect, it } from 'vitest';
import { BlockPool, type KvArray } from '../../src/engine/kv/block-pool.js';
import { KvCacheManager, type PagedSequenceKv } from '../../src/engine/kv/paged-kv.js';
import { GpuKvPool } from '../../src/engine/gpu/gpu-kv-pool.js';
import { WgslKernels, readBuffer } from '../../src/engine/gpu/wgsl-kernels.js';
import { KvTransfer, type KvLayerBuffers, type KvRowPlacement } from '../../src/engine/gpu/kv-transfer.js';
import { nodeShaderSource } from '../../src/backends/ort-webgpu-node.js';
import { mulberry32 } from '../helpers/prng.js';
import { BufferUsage } from '../../src/engine/gpu/usage.js';
import { gpu, skipNote } from './gpu.js';

const shape = { numLayers: 2, numKvHeads: 3, headDim: 5 };
const BLOCK = 4;
const BLOCKS = 40;

/** Random floats plus the values a float (rather than bit) copy could change. */
function fillSpecial(a: Float32Array, rand: () => number): void {
  const bits = new Uint32Array(a.buffer, a.byteOffset, a.length);
  for (let i = 0; i < a.length; i++) a[i] = (rand() - 0.5) * 8;
  bits[0] = 0x7fc00123; // a NaN with a payload
  bits[1] = 0x80000000; // -0
  bits[2] = 0x00000001; // smallest denormal
}

const bitsOf = (a: KvArray | ArrayBuffer): Uint32Array =>
  a instanceof ArrayBuffer ? new Uint32Array(a) : new Uint32Array(a.buffer, a.byteOffset, a.byteLength / 4);

describe.skipIf(!gpu)(`KV gather / scatter kernels on the device${skipNote}`, () => {
  let kernels: WgslKernels;
  const device = (): GPUDevice => gpu!.device;
  beforeAll(async () => {
    kernels = await WgslKernels.create(device(), nodeShaderSource, ['kv-gather', 'kv-scatter']);
  });

  /** A pool with random contents and sequences of the given lengths over scattered blocks. */
  function setup(seed: number, lengths: number[]) {
    const rand = mulberry32(seed);
    const pool = new BlockPool(shape, BLOCKS, BLOCK);
    for (let l = 0; l < shape.numLayers; l++) {
      // A pool made without storage holds float32.
      fillSpecial(pool.keys[l] as Float32Array, rand);
      fillSpecial(pool.values[l] as Float32Array, rand);
    }
    const manager = new KvCacheManager(pool, 'test');
    // Take and give back blocks in a shuffled order so that block tables are not 0, 1, 2, ...
    const hold = Array.from({ length: BLOCKS }, () => pool.allocate()!);
    for (let i = hold.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [hold[i], hold[j]] = [hold[j], hold[i]];
    }
    for (const id of hold) pool.release(id);
    const seqs = lengths.map((n) => {
      const kv = manager.create();
      expect(manager.reserve(kv, n)).toBe(true);
      kv.advance(n);
      return kv;
    });
    const gpuPool = new GpuKvPool(device(), shape, BLOCKS, BLOCK);
    for (let l = 0; l < shape.numLayers; l++) {
      device().queue.writeBuffer(gpuPool.keys[l], 0, pool.keys[l] as Float32Array<ArrayBuffer>);
      device().queue.writeBuffer(gpuPool.values[l], 0, pool.values[l] as Float32Array<ArrayBuffer>);
    }
    return { rand, pool, manager, seqs, gpuPool };
  }

  const storage = (floats: number, init?: Float32Array): GPUBuffer => {
    const b = device().createBuffer({
      size: Math.max(16, floats * 4),
      usage: BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
    });
    if (init) device().queue.writeBuffer(b, 0, init as Float32Array<ArrayBuffer>);
    return b;
  };

  it('gather equals PagedSequenceKv.gather bit for bit (partial last blocks, left padding)', async () => {
    for (const [seed, lengths] of [
      [1, [7, 13, 1, 4]],
      [2, [17]],
      [3, [5, 9, 0, 12, 3]],
    ] as [number, number[]][]) {
      const { seqs, gpuPool } = setup(seed, lengths);
      const P = Math.max(...lengths) + 2; // extra slots on the left too
      const rowFloats = shape.numKvHeads * P * shape.headDim;
      const transfer = new KvTransfer(kernels, gpuPool);
      const rows: KvRowPlacement[] = seqs.map((kv) => ({
        blocks: kv.blocks,
        length: kv.length,
        offset: P - kv.length,
        count: 0,
      }));
      const past: KvLayerBuffers[] = Array.from({ length: shape.numLayers }, () => ({
        // Filled with garbage first: the kernel must also write the padding (as zeros).
        keys: storage(seqs.length * rowFloats, new Float32Array(seqs.length * rowFloats).fill(7)),
        values: storage(seqs.length * rowFloats, new Float32Array(seqs.length * rowFloats).fill(7)),
      }));
      const encoder = device().createCommandEncoder();
      transfer.encodeGather(encoder, rows, P, past);
      device().queue.submit([encoder.finish()]);
      transfer.release();
      for (let layer = 0; layer < shape.numLayers; layer++) {
        const keys = new Float32Array(seqs.length * rowFloats);
        const values = new Float32Array(seqs.length * rowFloats);
        for (const [b, kv] of seqs.entries())
          kv.gather(
            layer,
            keys.subarray(b * rowFloats, (b + 1) * rowFloats),
            values.subarray(b * rowFloats, (b + 1) * rowFloats),
            P,
            P - kv.length,
          );
        const gotKeys = await readBuffer(device(), past[layer].keys, keys.byteLength);
        const gotValues = await readBuffer(device(), past[layer].values, values.byteLength);
        expect(bitsOf(gotKeys), `seed ${seed} layer ${layer} keys`).toEqual(bitsOf(keys));
        expect(bitsOf(gotValues), `seed ${seed} layer ${layer} values`).toEqual(bitsOf(values));
      }
      gpuPool.destroy();
    }
  });

  it('scatter equals PagedSequenceKv.scatter bit for bit (new tokens across block boundaries)', async () => {
    for (const [seed, lengths, counts] of [
      [4, [7, 13, 0, 4], [1, 6, 9, 1]],
      [5, [3], [14]],
    ] as [number, number[], number[]][]) {
      const { rand, pool, manager, seqs, gpuPool } = setup(seed, lengths);
      for (const [b, kv] of seqs.entries()) expect(manager.reserve(kv, counts[b])).toBe(true);
      const T = Math.max(...lengths) + Math.max(...counts);
      const rowFloats = shape.numKvHeads * T * shape.headDim;
      const present = Array.from({ length: shape.numLayers }, () => {
        const keys = new Float32Array(seqs.length * rowFloats);
        const values = new Float32Array(seqs.length * rowFloats);
        fillSpecial(keys, rand);
        fillSpecial(values, rand);
        return { keys, values };
      });
      // The device first, from the pool as it is now (reserve may have copied nothing: fresh blocks only).
      const transfer = new KvTransfer(kernels, gpuPool);
      const rows: KvRowPlacement[] = seqs.map((kv, b) => ({
        blocks: kv.blocks,
        length: kv.length,
        offset: T - counts[b],
        count: counts[b],
      }));
      const presentBuffers = present.map((p) => ({
        keys: storage(p.keys.length, p.keys),
        values: storage(p.values.length, p.values),
      }));
      const encoder = device().createCommandEncoder();
      transfer.encodeScatter(encoder, rows, T, presentBuffers);
      device().queue.submit([encoder.finish()]);
      transfer.release();
      for (let layer = 0; layer < shape.numLayers; layer++) {
        seqs.forEach((kv: PagedSequenceKv, b) => {
          const at = b * rowFloats;
          const { keys, values } = present[layer];
          kv.scatter(
            layer,
            keys.subarray(at, at + rowFloats),
            values.subarray(at, at + rowFloats),
            T,
            T - counts[b],
            counts[b],
          );
        });
        const gotKeys = await readBuffer(device(), gpuPool.keys[layer], pool.keys[layer].byteLength);
        const gotValues = await readBuffer(device(), gpuPool.values[layer], pool.values[layer].byteLength);
        // The whole pool: the new tokens landed where the CPU put them and nothing else moved.
        expect(bitsOf(gotKeys), `seed ${seed} layer ${layer} keys`).toEqual(bitsOf(pool.keys[layer]));
        expect(bitsOf(gotValues), `seed ${seed} layer ${layer} values`).toEqual(bitsOf(pool.values[layer]));
      }
      gpuPool.destroy();
    }
  });

  it('copies a block on the device as BlockPool.copyBlock does (copy-on-write)', async () => {
    const { pool, gpuPool } = setup(6, [9]);
    const encoder = device().createCommandEncoder();
    gpuPool.encodeCopyBlock(encoder, 3, 17);
    device().queue.submit([encoder.finish()]);
    pool.copyBlock(3, 17);
    for (let layer = 0; layer < shape.numLayers; layer++) {
      expect(bitsOf(await readBuffer(device(), gpuPool.keys[layer], pool.keys[layer].byteLength))).toEqual(
        bitsOf(pool.keys[layer]),
      );
      expect(bitsOf(await readBuffer(device(), gpuPool.values[layer], pool.values[layer].byteLength))).toEqual(
        bitsOf(pool.values[layer]),
      );
    }
    gpuPool.destroy();
  });
});

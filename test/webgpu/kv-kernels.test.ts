// shaders/kv-gather.wgsl and kv-scatter.wgsl against ArrayKvMemory's CPU gather / scatter on the
// same pool contents and block tables: bit-exact (compared as uint32 bit patterns), with odd shapes
// (3 KV heads, head_dim 5, blocks of 4 tokens), partial last blocks, scattered block tables, rows of
// different lengths in one batch, and NaN / -0 / denormal values that a float copy could alter.
import { beforeAll, describe, expect, it } from 'vitest';
import { BlockPool } from '../../src/engine/kv/block-pool.js';
import { KvCacheManager, type PagedSequenceKv } from '../../src/engine/kv/paged-kv.js';
import { ArrayKvMemory, type KvArray } from '../../src/engine/runners/array-kv-memory.js';
import { GpuKvPool } from '../../src/engine/runners/webgpu/gpu-kv-pool.js';
import { WgslKernels, readBuffer } from '../../src/engine/runners/webgpu/wgsl-kernels.js';
import { KvTransfer, type KvLayerBuffers, type KvRowPlacement } from '../../src/engine/runners/webgpu/kv-transfer.js';
import { nodeShaderSource } from '../../src/backends/ort-webgpu-node.js';
import { mulberry32 } from '../helpers/prng.js';
import { BufferUsage } from '../../src/engine/runners/webgpu/usage.js';
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

  /**
   * A pool with random contents and sequences of the given lengths over scattered blocks: the same bytes
   * in CPU memory (the reference) and on the device.
   */
  function setup(seed: number, lengths: number[]) {
    const rand = mulberry32(seed);
    const pool = new BlockPool(shape, BLOCKS, BLOCK);
    const memory = new ArrayKvMemory(shape, BLOCKS, BLOCK);
    for (let l = 0; l < shape.numLayers; l++) {
      // A memory made without arrays holds float32.
      fillSpecial(memory.keys[l] as Float32Array, rand);
      fillSpecial(memory.values[l] as Float32Array, rand);
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
      device().queue.writeBuffer(gpuPool.keys[l], 0, memory.keys[l] as Float32Array<ArrayBuffer>);
      device().queue.writeBuffer(gpuPool.values[l], 0, memory.values[l] as Float32Array<ArrayBuffer>);
    }
    return { rand, memory, manager, seqs, gpuPool };
  }

  const storage = (floats: number, init?: Float32Array): GPUBuffer => {
    const b = device().createBuffer({
      size: Math.max(16, floats * 4),
      usage: BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
    });
    if (init) device().queue.writeBuffer(b, 0, init as Float32Array<ArrayBuffer>);
    return b;
  };

  it('gather equals ArrayKvMemory.gather bit for bit (partial last blocks, left padding)', async () => {
    for (const [seed, lengths] of [
      [1, [7, 13, 1, 4]],
      [2, [17]],
      [3, [5, 9, 0, 12, 3]],
    ] as [number, number[]][]) {
      const { memory, seqs, gpuPool } = setup(seed, lengths);
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
          memory.gather(
            kv,
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

  it('scatter equals ArrayKvMemory.scatter bit for bit (new tokens across block boundaries)', async () => {
    for (const [seed, lengths, counts] of [
      [4, [7, 13, 0, 4], [1, 6, 9, 1]],
      [5, [3], [14]],
    ] as [number, number[], number[]][]) {
      const { rand, memory, manager, seqs, gpuPool } = setup(seed, lengths);
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
          kv.checkWritable(counts[b]);
          memory.scatter(
            kv,
            layer,
            keys.subarray(at, at + rowFloats),
            values.subarray(at, at + rowFloats),
            T,
            T - counts[b],
            counts[b],
          );
        });
        const gotKeys = await readBuffer(device(), gpuPool.keys[layer], memory.keys[layer].byteLength);
        const gotValues = await readBuffer(device(), gpuPool.values[layer], memory.values[layer].byteLength);
        // The whole pool: the new tokens landed where the CPU put them and nothing else moved.
        expect(bitsOf(gotKeys), `seed ${seed} layer ${layer} keys`).toEqual(bitsOf(memory.keys[layer]));
        expect(bitsOf(gotValues), `seed ${seed} layer ${layer} values`).toEqual(bitsOf(memory.values[layer]));
      }
      gpuPool.destroy();
    }
  });

  /** Every layer's keys and values of the device pool equal the CPU memory's, bit for bit. */
  async function expectSameBits(gpuPool: GpuKvPool, memory: ArrayKvMemory, what: string): Promise<void> {
    for (let layer = 0; layer < shape.numLayers; layer++) {
      expect(
        bitsOf(await readBuffer(device(), gpuPool.keys[layer], memory.keys[layer].byteLength)),
        `${what}: layer ${layer} keys`,
      ).toEqual(bitsOf(memory.keys[layer]));
      expect(
        bitsOf(await readBuffer(device(), gpuPool.values[layer], memory.values[layer].byteLength)),
        `${what}: layer ${layer} values`,
      ).toEqual(bitsOf(memory.values[layer]));
    }
  }

  it('copies a block on the device as ArrayKvMemory.copyBlock does (copy-on-write, at the next pass)', async () => {
    const { memory, gpuPool } = setup(6, [9]);
    gpuPool.copyBlock(3, 17);
    // Queued: nothing moves until a pass encodes the pending copies.
    const encoder = device().createCommandEncoder();
    gpuPool.encodePendingCopies(encoder);
    device().queue.submit([encoder.finish()]);
    memory.copyBlock(3, 17);
    await expectSameBits(gpuPool, memory, 'after the copy');
    // Encoded once: a second pass copies nothing again.
    memory.writeBlock(3, new Uint8Array(memory.blockBytes));
    gpuPool.writeBlock(3, new Uint8Array(gpuPool.blockBytes));
    const again = device().createCommandEncoder();
    gpuPool.encodePendingCopies(again);
    device().queue.submit([again.finish()]);
    await expectSameBits(gpuPool, memory, 'after a pass with no copies');
    gpuPool.destroy();
  });

  it("reads and writes blocks in ArrayKvMemory's stored form; a restore drops a copy queued onto its block", async () => {
    const { memory, gpuPool } = setup(7, [9]);
    expect(gpuPool.blockBytes).toBe(memory.blockBytes);
    for (const id of [0, 5, BLOCKS - 1])
      expect(await gpuPool.readBlock(id), `block ${id}`).toEqual(memory.readBlockNow(id));
    // A restore into block 20, which a copy-on-write copy still waiting for the next pass targets.
    const restored = memory.readBlockNow(11);
    gpuPool.copyBlock(2, 20);
    gpuPool.writeBlock(20, restored);
    memory.writeBlock(20, restored);
    const encoder = device().createCommandEncoder();
    gpuPool.encodePendingCopies(encoder);
    device().queue.submit([encoder.finish()]);
    await expectSameBits(gpuPool, memory, 'after the restore');
    expect(() => gpuPool.writeBlock(0, restored.subarray(4))).toThrow(RangeError);
    gpuPool.destroy();
  });
});

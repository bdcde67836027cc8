// The GGUF header parser (src/engine/formats/gguf) on files our writer makes: the same header from whole bytes and
// from chunks split anywhere, the reader left where the tensor data is read on, typed metadata getters whose
// errors name the key, and corrupt or unsupported files refused by name.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { writeGguf } from '../scripts/model/gguf-file.js';
import { presetGgufInput, writeLlamaGguf } from '../scripts/model/gguf-writer.js';
import { BufferByteReader, ChunkByteReader, EndOfDataError } from '../src/engine/formats/gguf/byte-reader.js';
import { GGML_TYPE, ggmlRowBytes, ggmlTensorBytes, ggmlTypeName } from '../src/engine/formats/gguf/ggml-types.js';
import {
  parseGgufHeader,
  readGgufHeader,
  tensorsByOffset,
  type GgufHeader,
} from '../src/engine/formats/gguf/gguf-header.js';
import { mulberry32 } from './helpers/prng.js';

let dir: string;
let file: Uint8Array;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'gguf-header-test-'));
  writeLlamaGguf(join(dir, 'tiny.gguf'), presetGgufInput('tiny', DEFAULT_SEED), 'Q4_K_M', { tokenizer: 'llama' });
  file = new Uint8Array(readFileSync(join(dir, 'tiny.gguf')));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function* chunks(bytes: Uint8Array, sizes: () => number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.length; ) {
    const n = Math.max(1, sizes());
    yield bytes.slice(at, at + n);
    at += n;
  }
}

/** The header as plain data, for equality across readers. */
function summary(h: GgufHeader): unknown {
  return { ...h, metadata: [...h.metadata.entries()] };
}

describe('GGUF header', () => {
  it('reads version, metadata, tensor table, alignment and data start', async () => {
    const { header: h, reader } = await readGgufHeader(file);
    expect(h.version).toBe(3);
    expect(h.alignment).toBe(32);
    expect(h.dataStart % 32).toBe(0);
    expect(reader.position).toBeLessThanOrEqual(h.dataStart);
    expect(h.dataStart - reader.position).toBeLessThan(32);
    expect(h.metadata.str('general.architecture')).toBe('llama');
    expect(h.metadata.u32('llama.block_count')).toBe(2);
    expect(h.metadata.f32('llama.attention.layer_norm_rms_epsilon')).toBe(Math.fround(1e-5));
    expect(h.metadata.strings('tokenizer.ggml.tokens')).toHaveLength(512);
    expect(h.metadata.strings('tokenizer.ggml.tokens')[3]).toBe('<0x00>');
    expect(h.metadata.numbers('tokenizer.ggml.scores')).toBeInstanceOf(Float32Array);
    expect(h.metadata.numbers('tokenizer.ggml.token_type')).toBeInstanceOf(Int32Array);
    expect(h.metadata.bool('tokenizer.ggml.add_bos_token')).toBe(true);
    const q = h.tensors.find((t) => t.name === 'blk.0.attn_q.weight')!;
    // tiny's rows of 64 are no K-quant: Q4_K_M falls back to Q5_0 as llama.cpp does.
    expect(q).toMatchObject({
      ne: [64, 64],
      type: GGML_TYPE.Q5_0,
      byteSize: ggmlTensorBytes(GGML_TYPE.Q5_0, [64, 64]),
    });
    const last = tensorsByOffset(h.tensors).at(-1)!;
    expect(h.dataStart + last.offset + last.byteSize!).toBeLessThanOrEqual(file.length);
  });

  it('parses the same header from chunks split anywhere, and reads the tensor data on from there', async () => {
    const whole = summary((await readGgufHeader(file)).header);
    const rnd = mulberry32(7);
    const splits: [string, () => number][] = [
      ['1 byte', () => 1],
      ['3 bytes', () => 3],
      ['7 bytes', () => 7],
      ['4 KiB', () => 4096],
      ['random 1..64', () => 1 + Math.floor(rnd() * 64)],
      ['random 1..5000', () => 1 + Math.floor(rnd() * 5000)],
    ];
    for (const [, size] of splits) {
      const reader = new ChunkByteReader(chunks(file, size));
      const header = await parseGgufHeader(reader);
      expect(summary(header)).toEqual(whole);
      await reader.skip(header.dataStart - reader.position);
      for (const t of tensorsByOffset(header.tensors)) {
        await reader.skip(header.dataStart + t.offset - reader.position);
        const got = new Uint8Array(t.byteSize!);
        await reader.readInto(got);
        const at = header.dataStart + t.offset;
        expect(got).toEqual(file.subarray(at, at + t.byteSize!));
      }
    }
  });

  it('names the key in metadata errors', async () => {
    const { metadata } = (await readGgufHeader(file)).header;
    expect(() => metadata.str('llama.block_count')).toThrow(
      'GGUF metadata llama.block_count is a u32 (2), not a string',
    );
    expect(() => metadata.u32('general.architecture')).toThrow('general.architecture');
    expect(() => metadata.u32('llama.nope')).toThrow('GGUF metadata has no llama.nope');
    expect(() => metadata.strings('tokenizer.ggml.scores')).toThrow(
      'GGUF metadata tokenizer.ggml.scores is an array of f32 (512), not an array of strings',
    );
    expect(metadata.u32('llama.nope', 7)).toBe(7);
  });

  it('refuses what is not a GGUF it can read, by name', async () => {
    const patched = (at: number, bytes: number[]): Uint8Array => {
      const b = file.slice();
      b.set(bytes, at);
      return b;
    };
    const parse = (b: Uint8Array) => parseGgufHeader(new BufferByteReader(b));
    await expect(parse(patched(0, [0x47, 0x47, 0x4d, 0x4c]))).rejects.toThrow('not a GGUF file');
    await expect(parse(patched(4, [1, 0, 0, 0]))).rejects.toThrow('GGUF version 1 is not supported');
    await expect(parse(patched(4, [0, 0, 0, 3]))).rejects.toThrow('big-endian GGUF');
    await expect(parse(patched(4, [9, 0, 0, 0]))).rejects.toThrow('GGUF version 9 is not supported');
    await expect(parse(file.subarray(0, 5000))).rejects.toThrow('the data ends at byte 5000');
    await expect(new BufferByteReader(file.subarray(0, 2)).u32()).rejects.toThrow(EndOfDataError);
    await expect(new ChunkByteReader(chunks(file.subarray(0, 5000), () => 100)).u32()).resolves.toBe(0x46554747);
  });

  it('refuses overlapping or misaligned tensors and duplicate names', async () => {
    const tensor = (name: string) => ({ name, ne: [32], type: 'F32' as const, data: () => new Float32Array(32) });
    writeGguf(join(dir, 'dup.gguf'), [], [tensor('a'), tensor('a')]);
    await expect(readGgufHeader(new Uint8Array(readFileSync(join(dir, 'dup.gguf'))))).rejects.toThrow(
      'tensor a appears twice',
    );
    writeGguf(join(dir, 'two.gguf'), [], [tensor('a'), tensor('b')]);
    const two = new Uint8Array(readFileSync(join(dir, 'two.gguf')));
    // The second entry's offset is the table's last u64: make it overlap the first, then misalign it.
    const { header, reader } = await readGgufHeader(two);
    const offsetAt = reader.position - 8;
    expect(header.tensors[1].offset).toBe(128);
    const overlap = two.slice();
    overlap[offsetAt] = 64;
    await expect(readGgufHeader(overlap)).rejects.toThrow('tensors a and b overlap');
    const misaligned = two.slice();
    misaligned[offsetAt] = 130;
    await expect(readGgufHeader(misaligned)).rejects.toThrow('tensor b starts at offset 130, not a multiple of 32');
  });
});

describe('ggml types', () => {
  it('knows block sizes and names the types it does not', () => {
    expect(ggmlRowBytes(GGML_TYPE.Q8_0, 64)).toBe(68);
    expect(ggmlRowBytes(GGML_TYPE.Q4_K, 512)).toBe(288);
    expect(ggmlRowBytes(GGML_TYPE.Q6_K, 256)).toBe(210);
    expect(ggmlRowBytes(GGML_TYPE.Q5_K, 256)).toBe(176);
    expect(ggmlRowBytes(GGML_TYPE.BF16, 3)).toBe(6);
    expect(ggmlTensorBytes(GGML_TYPE.Q4_1, [64, 3])).toBe(120);
    expect(() => ggmlRowBytes(GGML_TYPE.Q4_K, 64)).toThrow('a Q4_K row holds whole blocks of 256 values, not 64');
    expect(ggmlTypeName(16)).toBe('IQ2_XXS');
    expect(() => ggmlRowBytes(16, 256)).toThrow('ggml type IQ2_XXS is not supported');
    expect(() => ggmlRowBytes(99, 256)).toThrow('ggml type unknown type 99 is not supported');
  });
});

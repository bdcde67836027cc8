// Reader for Hugging Face safetensors files: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__"?}, then the raw tensor bytes
// (offsets relative to the end of the header). Sharded checkpoints add model.safetensors.index.json
// ({"weight_map": {name: file}}). Tensors are returned as float32 (F32, F16 and BF16 are read).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { halfValue } from '../../src/engine/model/half.js';

export interface FloatTensor {
  dims: number[];
  data: Float32Array;
}

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

const BYTES: Record<string, number> = { F32: 4, F16: 2, BF16: 2 };

/** One safetensors file: names and shapes at once, each tensor decoded to float32 on demand. */
export class SafetensorsFile {
  private constructor(
    private readonly bytes: Uint8Array,
    private readonly dataStart: number,
    readonly entries: ReadonlyMap<string, HeaderEntry>,
    readonly path: string,
  ) {}

  static read(path: string): SafetensorsFile {
    const buf = readFileSync(path);
    const bytes = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    if (bytes.byteLength < 8) throw new Error(`${path}: not a safetensors file (shorter than 8 bytes)`);
    const headerLen = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
    if (headerLen > bytes.byteLength - 8 || headerLen > 100 << 20)
      throw new Error(`${path}: not a safetensors file (header length ${headerLen})`);
    let header: Record<string, HeaderEntry | Record<string, string>>;
    try {
      header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLen)));
    } catch {
      throw new Error(`${path}: safetensors header is not JSON`);
    }
    const entries = new Map<string, HeaderEntry>();
    for (const [name, entry] of Object.entries(header))
      if (name !== '__metadata__') entries.set(name, entry as HeaderEntry);
    const file = new SafetensorsFile(bytes, 8 + headerLen, entries, path);
    for (const [name, e] of entries) {
      const [begin, end] = e.data_offsets;
      const valid =
        Number.isSafeInteger(begin) &&
        Number.isSafeInteger(end) &&
        begin >= 0 &&
        begin <= end &&
        end <= bytes.byteLength - file.dataStart;
      if (!valid) throw new Error(`${path}: tensor ${name} lies outside the file`);
    }
    return file;
  }

  tensor(name: string): FloatTensor {
    const e = this.entries.get(name);
    if (!e) throw new Error(`${this.path}: no tensor ${name}`);
    const size = BYTES[e.dtype];
    if (!size)
      throw new Error(
        `${this.path}: tensor ${name} has dtype ${e.dtype}; only F32, F16 and BF16 checkpoints can be imported`,
      );
    const count = e.shape.reduce((a, b) => a * b, 1);
    const [begin, end] = e.data_offsets;
    if (end - begin !== count * size)
      throw new Error(`${this.path}: tensor ${name} has ${end - begin} bytes for shape [${e.shape}] ${e.dtype}`);
    const raw = this.bytes.subarray(this.dataStart + begin, this.dataStart + end);
    const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const data = new Float32Array(count);
    if (e.dtype === 'F32') for (let i = 0; i < count; i++) data[i] = dv.getFloat32(i * 4, true);
    else if (e.dtype === 'F16') for (let i = 0; i < count; i++) data[i] = halfValue(dv.getUint16(i * 2, true));
    else {
      // bfloat16 is the top half of a float32.
      const u32 = new Uint32Array(data.buffer);
      for (let i = 0; i < count; i++) u32[i] = dv.getUint16(i * 2, true) << 16;
    }
    return { dims: [...e.shape], data };
  }
}

/** All tensors of a Hugging Face folder: model.safetensors, or the shards its index names. */
export class SafetensorsCheckpoint {
  private readonly files = new Map<string, SafetensorsFile>();
  private constructor(
    private readonly dir: string,
    readonly fileOf: ReadonlyMap<string, string>,
  ) {}

  static open(dir: string): SafetensorsCheckpoint {
    const index = join(dir, 'model.safetensors.index.json');
    if (existsSync(index)) {
      const parsed = JSON.parse(readFileSync(index, 'utf8')) as { weight_map?: Record<string, string> };
      if (!parsed.weight_map || typeof parsed.weight_map !== 'object') throw new Error(`${index}: no weight_map`);
      for (const file of new Set(Object.values(parsed.weight_map))) {
        if (file.includes('/') || file.includes('\\') || !existsSync(join(dir, file)))
          throw new Error(`${index} names shard ${file}, which is not in ${dir}`);
      }
      return new SafetensorsCheckpoint(dir, new Map(Object.entries(parsed.weight_map)));
    }
    const single = join(dir, 'model.safetensors');
    if (!existsSync(single)) throw new Error(`${dir} has neither model.safetensors nor model.safetensors.index.json`);
    const names = SafetensorsFile.read(single).entries.keys();
    return new SafetensorsCheckpoint(dir, new Map([...names].map((n) => [n, 'model.safetensors'])));
  }

  has(name: string): boolean {
    return this.fileOf.has(name);
  }

  tensor(name: string): FloatTensor {
    const file = this.fileOf.get(name);
    if (!file) throw new Error(`checkpoint has no tensor ${name}`);
    let f = this.files.get(file);
    if (!f) {
      f = SafetensorsFile.read(join(this.dir, file));
      this.files.set(file, f);
    }
    if (!f.entries.has(name)) throw new Error(`${file} does not hold ${name}, although the index says it does`);
    return f.tensor(name);
  }
}

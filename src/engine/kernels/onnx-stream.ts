import { UnsupportedByKernels } from './llama-weights.js';
import type { InitializerRef } from './onnx-initializers.js';

/** Where streamed tensor bytes go: linear memory, written piece by piece as they arrive. */
export interface StreamSink {
  /** Room for `size` bytes; may refuse (throw), e.g. past a memory budget. */
  alloc(size: number): number;
  write(ptr: number, bytes: Uint8Array): void;
}

/** Pulls bytes from chunks as they come, keeping only the unread part of the current chunk. */
class ChunkReader {
  private chunk: Uint8Array = new Uint8Array(0);
  private at = 0;
  /** Bytes consumed since the start of the file. */
  pos = 0;
  private readonly chunks: AsyncIterator<Uint8Array>;

  constructor(source: AsyncIterable<Uint8Array>) {
    this.chunks = source[Symbol.asyncIterator]();
  }

  /** False at the end of the file. */
  private async fill(): Promise<boolean> {
    while (this.at >= this.chunk.length) {
      const next = await this.chunks.next();
      if (next.done) return false;
      this.chunk = next.value;
      this.at = 0;
    }
    return true;
  }

  async eof(): Promise<boolean> {
    return !(await this.fill());
  }

  async byte(): Promise<number> {
    if (!(await this.fill())) throw new Error('ONNX file: ends inside a field');
    this.pos++;
    return this.chunk[this.at++];
  }

  async varint(): Promise<number> {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      const b = await this.byte();
      value += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return value;
      scale *= 128;
    }
    throw new Error('ONNX file: varint longer than 10 bytes');
  }

  /** Hands the next `n` bytes to `take` in the pieces they arrive in (offset within the n). */
  async pass(n: number, take: (bytes: Uint8Array, offset: number) => void): Promise<void> {
    for (let done = 0; done < n; ) {
      if (!(await this.fill())) throw new Error('ONNX file: ends inside a field');
      const piece = this.chunk.subarray(this.at, this.at + Math.min(n - done, this.chunk.length - this.at));
      take(piece, done);
      this.at += piece.length;
      this.pos += piece.length;
      done += piece.length;
    }
  }

  async bytes(n: number): Promise<Uint8Array> {
    const out = new Uint8Array(n);
    await this.pass(n, (piece, offset) => out.set(piece, offset));
    return out;
  }

  async skip(wire: number): Promise<void> {
    if (wire === 0) await this.varint();
    else if (wire === 1) await this.pass(8, () => {});
    else if (wire === 2) await this.pass(await this.varint(), () => {});
    else if (wire === 5) await this.pass(4, () => {});
    else throw new Error(`ONNX file: unsupported protobuf wire type ${wire}`);
  }
}

/**
 * Reads an ONNX model as it streams in and writes every initializer's raw_data straight into `sink`, so the
 * file is never held whole: what stays is the tensors, once, where the kernels read them. Returns each
 * initializer's name, element type, dims and pointer (`ptr`). Relies on the field order every ONNX writer
 * uses (dims, data_type and name before raw_data); a tensor whose raw_data comes first is refused.
 */
export async function streamInitializers(
  source: AsyncIterable<Uint8Array>,
  sink: StreamSink,
): Promise<Map<string, InitializerRef>> {
  const r = new ChunkReader(source);
  const out = new Map<string, InitializerRef>();
  while (!(await r.eof())) {
    const tag = await r.varint();
    if (tag !== ((7 << 3) | 2)) {
      await r.skip(tag & 7);
      continue;
    }
    const graphEnd = (await r.varint()) + r.pos;
    while (r.pos < graphEnd) {
      const t = await r.varint();
      if (t !== ((5 << 3) | 2)) {
        await r.skip(t & 7);
        continue;
      }
      const tensorEnd = (await r.varint()) + r.pos;
      const ref: InitializerRef = { name: '', dataType: 0, dims: [], start: 0, end: 0 };
      while (r.pos < tensorEnd) {
        const f = await r.varint();
        const [field, wire] = [Math.floor(f / 8), f & 7];
        if (field === 1 && wire === 0) ref.dims.push(await r.varint());
        else if (field === 1 && wire === 2) {
          const end = (await r.varint()) + r.pos;
          while (r.pos < end) ref.dims.push(await r.varint());
        } else if (field === 2 && wire === 0) ref.dataType = await r.varint();
        else if (field === 8 && wire === 2) ref.name = new TextDecoder().decode(await r.bytes(await r.varint()));
        else if (field === 9 && wire === 2) {
          if (!ref.name)
            throw new UnsupportedByKernels("an initializer's raw_data comes before its name in the ONNX file");
          const size = await r.varint();
          const ptr = sink.alloc(size);
          await r.pass(size, (piece, offset) => sink.write(ptr + offset, piece));
          [ref.ptr, ref.start, ref.end] = [ptr, 0, size];
        } else await r.skip(wire);
      }
      out.set(ref.name, ref);
    }
  }
  return out;
}

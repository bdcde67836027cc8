import { seekPast } from '../../model/model-files.js';
// Little-endian reads from bytes that arrive in chunks split anywhere (a fetch body, an R2 object), or from
// bytes already whole. The GGUF header parser reads through this, and the loader goes on reading tensor
// data from the same reader where the header ends.

/** Thrown when the data ends before a read is satisfied. */
export class EndOfDataError extends Error {
  constructor(position: number, wanted: number) {
    super(`the data ends at byte ${position}, ${wanted} byte(s) short of what the header says follows`);
    this.name = 'EndOfDataError';
  }
}

export interface ByteReader {
  /** Absolute offset of the next unread byte. */
  readonly position: number;
  u8(): Promise<number>;
  i8(): Promise<number>;
  u16(): Promise<number>;
  i16(): Promise<number>;
  u32(): Promise<number>;
  i32(): Promise<number>;
  u64(): Promise<bigint>;
  i64(): Promise<bigint>;
  f32(): Promise<number>;
  f64(): Promise<number>;
  /** The next n bytes. May be a view into a chunk: do not write to it. */
  bytes(n: number): Promise<Uint8Array>;
  /** Fills `dest` with the next dest.length bytes (e.g. straight into WebAssembly memory). */
  readInto(dest: Uint8Array): Promise<void>;
  skip(n: number): Promise<void>;
  /**
   * The next n bytes if they are already at hand in one piece, else null; consumes nothing. With `advance`,
   * the fast path for the many small reads of a header (tens of thousands of token strings).
   */
  peek(n: number): Uint8Array | null;
  /** Consumes n bytes that `peek` returned. */
  advance(n: number): void;
  /** Consumes the rest of the data, so a source that watches its stream end (a digest) sees it end. */
  toEnd(): Promise<void>;
}

const scratch = new DataView(new ArrayBuffer(8));

/** Shared by both readers: the typed reads, through `bytes`. */
abstract class LittleEndianReader implements ByteReader {
  abstract readonly position: number;
  abstract bytes(n: number): Promise<Uint8Array>;
  abstract readInto(dest: Uint8Array): Promise<void>;
  abstract skip(n: number): Promise<void>;
  abstract toEnd(): Promise<void>;
  abstract peek(n: number): Uint8Array | null;
  abstract advance(n: number): void;

  /** A DataView over the next n bytes (n <= 8), consumed. */
  private async view(n: number): Promise<DataView> {
    const at = this.peek(n);
    if (at) {
      this.advance(n);
      return new DataView(at.buffer, at.byteOffset, n);
    }
    const b = await this.bytes(n);
    for (let i = 0; i < n; i++) scratch.setUint8(i, b[i]);
    return scratch;
  }

  async u8(): Promise<number> {
    return (await this.view(1)).getUint8(0);
  }
  async i8(): Promise<number> {
    return (await this.view(1)).getInt8(0);
  }
  async u16(): Promise<number> {
    return (await this.view(2)).getUint16(0, true);
  }
  async i16(): Promise<number> {
    return (await this.view(2)).getInt16(0, true);
  }
  async u32(): Promise<number> {
    return (await this.view(4)).getUint32(0, true);
  }
  async i32(): Promise<number> {
    return (await this.view(4)).getInt32(0, true);
  }
  async u64(): Promise<bigint> {
    return (await this.view(8)).getBigUint64(0, true);
  }
  async i64(): Promise<bigint> {
    return (await this.view(8)).getBigInt64(0, true);
  }
  async f32(): Promise<number> {
    return (await this.view(4)).getFloat32(0, true);
  }
  async f64(): Promise<number> {
    return (await this.view(8)).getFloat64(0, true);
  }
}

/** Reads bytes already whole (a file read into memory, a test buffer). */
export class BufferByteReader extends LittleEndianReader {
  private at = 0;

  constructor(private readonly data: Uint8Array) {
    super();
  }

  get position(): number {
    return this.at;
  }

  private take(n: number): number {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`cannot read ${n} bytes`);
    if (this.at + n > this.data.length) throw new EndOfDataError(this.data.length, this.at + n - this.data.length);
    this.at += n;
    return this.at - n;
  }

  async bytes(n: number): Promise<Uint8Array> {
    const from = this.take(n);
    return this.data.subarray(from, from + n);
  }

  async readInto(dest: Uint8Array): Promise<void> {
    const from = this.take(dest.length);
    dest.set(this.data.subarray(from, from + dest.length));
  }

  async skip(n: number): Promise<void> {
    this.take(n);
  }

  peek(n: number): Uint8Array | null {
    return this.at + n <= this.data.length ? this.data.subarray(this.at, this.at + n) : null;
  }

  advance(n: number): void {
    this.take(n);
  }

  async toEnd(): Promise<void> {
    this.at = this.data.length;
  }
}

/**
 * Reads chunks as they arrive, holding only the unread rest of the current chunk: a read that spans
 * chunks is copied together, one that fits in a chunk is a view of it.
 */
export class ChunkByteReader extends LittleEndianReader {
  private chunk: Uint8Array = new Uint8Array(0);
  private at = 0;
  private consumed = 0;
  private source: AsyncIterator<Uint8Array>;

  constructor(
    private readonly chunks: AsyncIterable<Uint8Array>,
    private readonly seekMin?: number,
  ) {
    super();
    this.source = chunks[Symbol.asyncIterator]();
  }

  get position(): number {
    return this.consumed;
  }

  /** Makes the current chunk non-empty; false at the end of the data. */
  private async fill(): Promise<boolean> {
    while (this.at >= this.chunk.length) {
      const next = await this.source.next();
      if (next.done) return false;
      this.chunk = next.value;
      this.at = 0;
    }
    return true;
  }

  /** Hands the next n bytes to `take` in the pieces they lie in. */
  private async pass(n: number, take: ((piece: Uint8Array, offset: number) => void) | null): Promise<void> {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`cannot read ${n} bytes`);
    for (let done = 0; done < n; ) {
      if (!(await this.fill())) throw new EndOfDataError(this.consumed, n - done);
      const len = Math.min(n - done, this.chunk.length - this.at);
      take?.(this.chunk.subarray(this.at, this.at + len), done);
      this.at += len;
      this.consumed += len;
      done += len;
    }
  }

  async bytes(n: number): Promise<Uint8Array> {
    if (n > 0 && (await this.fill()) && this.chunk.length - this.at >= n) {
      const view = this.chunk.subarray(this.at, this.at + n);
      this.advance(n);
      return view;
    }
    const out = new Uint8Array(n);
    await this.pass(n, (piece, offset) => out.set(piece, offset));
    return out;
  }

  async readInto(dest: Uint8Array): Promise<void> {
    await this.pass(dest.length, (piece, offset) => dest.set(piece, offset));
  }

  async skip(n: number): Promise<void> {
    const buffered = this.chunk.length - this.at;
    const after = seekPast(this.chunks, this.consumed, n, buffered, this.seekMin);
    if (!after) return this.pass(n, null);
    // A long run nobody reads (another stage's layers): a ranged read past it instead of fetching it.
    await this.source.return?.();
    this.source = after;
    this.chunk = new Uint8Array(0);
    this.at = 0;
    this.consumed += n;
  }

  peek(n: number): Uint8Array | null {
    return this.chunk.length - this.at >= n ? this.chunk.subarray(this.at, this.at + n) : null;
  }

  advance(n: number): void {
    if (this.chunk.length - this.at < n) throw new RangeError(`advance(${n}) past what peek returned`);
    this.at += n;
    this.consumed += n;
  }

  async toEnd(): Promise<void> {
    // Read to the end only for what watches the stream (a digest); a seekable file is not watched.
    if ('from' in this.chunks) {
      await this.source.return?.();
      return;
    }
    this.consumed += this.chunk.length - this.at;
    this.at = this.chunk.length;
    while (await this.fill()) {
      this.consumed += this.chunk.length;
      this.at = this.chunk.length;
    }
  }
}

/** A reader over whole bytes or over chunks (`seekMin`: SEEK_MIN_BYTES, for tests). */
export function byteReader(source: Uint8Array | AsyncIterable<Uint8Array>, seekMin?: number): ByteReader {
  return source instanceof Uint8Array ? new BufferByteReader(source) : new ChunkByteReader(source, seekMin);
}

import { seekPast } from '../../model/model-files.js';

/** Pulls bytes from chunks as they come (split anywhere), keeping only the unread part of the current chunk. */
export class ChunkReader {
  private chunk: Uint8Array = new Uint8Array(0);
  private at = 0;
  /** Bytes consumed since the start of the file. */
  pos = 0;
  private chunks: AsyncIterator<Uint8Array>;

  constructor(
    private readonly source: AsyncIterable<Uint8Array>,
    /** What the file is, for messages. */
    private readonly what: string,
    private readonly seekMin?: number,
  ) {
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
    if (!(await this.fill())) throw new Error(`${this.what}: ends early`);
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
    throw new Error(`${this.what}: varint longer than 10 bytes`);
  }

  /** Hands the next `n` bytes to `take` in the pieces they arrive in (offset within the n). */
  async pass(n: number, take: (bytes: Uint8Array, offset: number) => void): Promise<void> {
    for (let done = 0; done < n; ) {
      if (!(await this.fill())) throw new Error(`${this.what}: ends early`);
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

  async skip(n: number): Promise<void> {
    const after = seekPast(this.source, this.pos, n, this.chunk.length - this.at, this.seekMin);
    if (!after) return this.pass(n, () => {});
    // A long run nobody reads (another stage's layers, a table no role claims): a ranged read past it.
    await this.chunks.return?.();
    this.chunks = after;
    this.chunk = new Uint8Array(0);
    this.at = 0;
    this.pos += n;
  }

  /** Skips a protobuf field's value of wire type `wire`. */
  async skipField(wire: number): Promise<void> {
    if (wire === 0) await this.varint();
    else if (wire === 1) await this.skip(8);
    else if (wire === 2) await this.skip(await this.varint());
    else if (wire === 5) await this.skip(4);
    else throw new Error(`${this.what}: unsupported protobuf wire type ${wire}`);
  }
}

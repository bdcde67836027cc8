import type { ModelSource } from './model-files.js';

/** Bytes per piece: each is hashed natively (WebCrypto), and the digest is taken over the pieces' digests. */
const PIECE = 4 * 2 ** 20;

const hex = (digest: ArrayBuffer): string =>
  [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');

/**
 * A digest of a file's bytes however they arrive: SHA-256 of each 4 MiB piece, then SHA-256 of those
 * digests. The pieces are fixed, so one file gives one digest whether it came whole, from a folder, over
 * HTTP or from R2 in chunks of any size. WebCrypto has no incremental SHA-256; hashing pieces as they pass
 * keeps the cost native and the file unheld.
 */
export class PieceDigest {
  private readonly piece = new Uint8Array(PIECE);
  private filled = 0;
  private readonly digests: Uint8Array[] = [];

  async update(chunk: Uint8Array): Promise<void> {
    for (let at = 0; at < chunk.length; ) {
      const n = Math.min(PIECE - this.filled, chunk.length - at);
      this.piece.set(chunk.subarray(at, at + n), this.filled);
      this.filled += n;
      at += n;
      if (this.filled === PIECE) await this.close();
    }
  }

  async hex(): Promise<string> {
    if (this.filled > 0 || this.digests.length === 0) await this.close();
    const all = new Uint8Array(this.digests.length * 32);
    for (const [i, d] of this.digests.entries()) all.set(d, i * 32);
    return hex(await crypto.subtle.digest('SHA-256', all));
  }

  private async close(): Promise<void> {
    this.digests.push(new Uint8Array(await crypto.subtle.digest('SHA-256', this.piece.subarray(0, this.filled))));
    this.filled = 0;
  }
}

/**
 * `source` with file `path` digested as it is read or streamed: digest() gives the digest of the last
 * complete read of it (a load that streamed part of the file and then read it whole counts the read).
 */
export function digestingSource(source: ModelSource, path: string): { source: ModelSource; digest(): Promise<string> } {
  let last: Promise<string> | undefined;
  const wrapped: ModelSource = {
    where: source.where,
    fix: source.fix,
    ...(source.exists ? { exists: source.exists.bind(source) } : {}),
    read: async (p) => {
      const bytes = await source.read(p);
      if (p === path && bytes) {
        const d = new PieceDigest();
        await d.update(bytes);
        last = d.hex();
      }
      return bytes;
    },
  };
  if (source.stream) {
    const stream = source.stream.bind(source);
    wrapped.stream = async (p) => {
      const s = await stream(p);
      if (p !== path || !s) return s;
      const d = new PieceDigest();
      async function* digested(): AsyncGenerator<Uint8Array> {
        for await (const chunk of s!.chunks) {
          await d.update(chunk);
          yield chunk;
        }
        last = d.hex();
      }
      return { ...s, chunks: digested() };
    };
  }
  return {
    source: wrapped,
    digest: () => last ?? Promise.reject(new Error(`${path} was never read in full`)),
  };
}

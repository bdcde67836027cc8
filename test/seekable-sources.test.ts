// A reader that skips a long run of bytes (another pipeline stage's layers) asks its source for a ranged read
// past them instead of fetching them: files by offset, HTTP by Range (a server that ignores it is read through
// to the offset). What comes after the skip is the file's own bytes, either way.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkByteReader } from '../src/engine/formats/gguf/byte-reader.js';
import { ChunkReader } from '../src/engine/formats/onnx/chunk-reader.js';
import { seekable, type ModelSource, type SeekableChunks } from '../src/engine/model/model-files.js';
import { directorySource } from '../src/sources/directory-source.js';
import { fetchSource } from '../src/sources/fetch-source.js';

const FILE = Uint8Array.from({ length: 300_000 }, (_, i) => (i * 7 + (i >> 8)) & 0xff);

/** FILE in chunks of 1,000, counting what is delivered and where ranged reads start. */
function counted(): { chunks: SeekableChunks; delivered: () => number; seeks: number[] } {
  let delivered = 0;
  const seeks: number[] = [];
  async function* from(offset: number): AsyncGenerator<Uint8Array> {
    for (let at = offset; at < FILE.length; at += 1000) {
      const piece = FILE.subarray(at, Math.min(at + 1000, FILE.length));
      delivered += piece.length;
      yield piece;
    }
  }
  return {
    chunks: seekable(from(0), (offset) => {
      seeks.push(offset);
      return from(offset);
    }),
    delivered: () => delivered,
    seeks,
  };
}

describe('readers skipping long runs', () => {
  it('GGUF reader: a ranged read past the run, the same bytes after it', async () => {
    const src = counted();
    const r = new ChunkByteReader(src.chunks, 10_000);
    expect(await r.bytes(10)).toEqual(FILE.subarray(0, 10));
    await r.skip(200_000);
    expect(r.position).toBe(200_010);
    expect(await r.bytes(5000)).toEqual(FILE.subarray(200_010, 205_010));
    expect(src.seeks).toEqual([200_010]);
    expect(src.delivered()).toBeLessThan(20_000);
    // A short skip is read through.
    await r.skip(100);
    expect(await r.bytes(3)).toEqual(FILE.subarray(205_110, 205_113));
    expect(src.seeks).toHaveLength(1);
  });

  it('ONNX reader: the same, and a stream that cannot seek is read through', async () => {
    const src = counted();
    const r = new ChunkReader(src.chunks, 'test file', 10_000);
    await r.skip(150_000);
    expect(await r.bytes(4)).toEqual(FILE.subarray(150_000, 150_004));
    expect(src.seeks).toEqual([150_000]);
    const plain = new ChunkReader(
      (async function* () {
        yield FILE;
      })(),
      'plain',
      10_000,
    );
    await plain.skip(150_000);
    expect(await plain.bytes(4)).toEqual(FILE.subarray(150_000, 150_004));
  });
});

async function fromOffset(source: ModelSource, offset: number, n: number): Promise<Uint8Array> {
  const stream = await source.stream!('model.bin');
  const chunks = stream!.chunks as SeekableChunks;
  expect(typeof chunks.from).toBe('function');
  const out = new Uint8Array(n);
  let at = 0;
  for await (const chunk of chunks.from(offset)) {
    out.set(chunk.subarray(0, Math.min(chunk.length, n - at)), at);
    at += chunk.length;
    if (at >= n) break;
  }
  return out;
}

describe('sources read from an offset', () => {
  let dir: string;
  let server: Server;
  let base: string;
  const ranges: (string | undefined)[] = [];
  let honourRange = true;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'edge-infer-seek-'));
    writeFileSync(join(dir, 'model.bin'), FILE);
    server = createServer((req, res) => {
      ranges.push(req.headers.range);
      const m = honourRange ? /^bytes=(\d+)-$/.exec(req.headers.range ?? '') : null;
      if (m) {
        const start = Number(m[1]);
        res.writeHead(206, { 'content-range': `bytes ${start}-${FILE.length - 1}/${FILE.length}` });
        res.end(FILE.subarray(start));
      } else {
        res.writeHead(200, { 'content-length': FILE.length });
        res.end(FILE);
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('a directory, by file offset', async () => {
    expect(await fromOffset(directorySource(dir), 123_456, 1000)).toEqual(FILE.subarray(123_456, 124_456));
  });

  it('HTTP, with a Range request; read through to the offset where the server ignores Range', async () => {
    const source = fetchSource({ fetch: (u, init) => fetch(u, init) }, base);
    expect(await fromOffset(source, 200_000, 1000)).toEqual(FILE.subarray(200_000, 201_000));
    expect(ranges.at(-1)).toBe('bytes=200000-');
    honourRange = false;
    expect(await fromOffset(source, 250_001, 1000)).toEqual(FILE.subarray(250_001, 251_001));
  });
});

import { readableChunks } from '../engine/model/model-files.js';

/** What each chunk of a large body is filled to before it is handed on. */
export const CHUNK_BYTES = 1 << 20;

/**
 * A body as chunks of `chunkBytes` (the last one shorter), read with a BYOB reader straight into each chunk's
 * buffer. A fetch body in workerd arrives in pieces of 4 KiB or so: 24,000 reads, promises and loader calls
 * for a 94 MiB weights file, where this makes ~95. A chunk is handed on only when full, so no chunk already
 * handed on is ever detached by the next read (a BYOB read transfers the buffer it fills). Streams that
 * are not byte streams (Node's own, some polyfills) are read as they come. Leaving early cancels the body.
 */
export async function* sizedChunks(
  stream: ReadableStream<Uint8Array>,
  chunkBytes = CHUNK_BYTES,
): AsyncGenerator<Uint8Array> {
  let reader: ReadableStreamBYOBReader;
  try {
    reader = stream.getReader({ mode: 'byob' });
  } catch {
    yield* readableChunks(stream);
    return;
  }
  let done = false;
  try {
    for (;;) {
      let chunk = new Uint8Array(chunkBytes);
      let filled = 0;
      while (filled < chunkBytes) {
        const next = await reader.read(chunk.subarray(filled));
        if (next.done) {
          done = true;
          if (next.value) chunk = new Uint8Array(next.value.buffer, 0, chunkBytes);
          break;
        }
        filled += next.value.byteLength;
        chunk = new Uint8Array(next.value.buffer, 0, chunkBytes);
      }
      if (filled > 0) yield chunk.subarray(0, filled);
      if (done) return;
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}

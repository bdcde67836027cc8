// Deadlines on model reads (issue 44): a source that stops sending fails the read after the stall deadline
// instead of holding the load (and every request waiting on it) forever, and the load's signal stops every
// read at once. Real Responses over real streams; the source here never sends what it promised.
import { describe, expect, it } from 'vitest';
import { fetchSource } from '../src/sources/fetch-source.js';
import { LoadTimeoutError } from '../src/sources/load-deadline.js';

/** A fetcher whose files send `sent` bytes and then nothing, never ending. */
function stalling(sent: number) {
  const pending: ReadableStream[] = [];
  return {
    pending,
    fetch: async (_url: string, init?: RequestInit) => {
      if (init?.method === 'HEAD') return new Response(null, { status: 200, headers: { 'content-length': '100' } });
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          if (sent > 0) controller.enqueue(new Uint8Array(sent));
        },
      });
      pending.push(body);
      return new Response(body, { headers: { 'content-length': String(sent + 100) } });
    },
  };
}

describe('model reads with deadlines', () => {
  it('a file that stops arriving fails the read after the stall deadline, naming the file', async () => {
    const source = fetchSource(stalling(10), 'http://models.test/tiny/', undefined, undefined, { stallMs: 50 });
    const err = await source.read('config.json').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LoadTimeoutError);
    expect((err as Error).message).toMatch(/fetching config\.json at http:\/\/models\.test\/tiny\/: no data for 50 ms/);
  });

  it('a streamed weights file that stalls mid-way ends its chunks with the same error', async () => {
    const source = fetchSource(stalling(3), 'http://models.test/tiny/', undefined, undefined, { stallMs: 50 });
    const file = await source.stream!('onnx/model.onnx');
    const read = async () => {
      for await (const _ of file!.chunks) {
      }
    };
    await expect(read()).rejects.toBeInstanceOf(LoadTimeoutError);
  });

  it("the load's signal stops a read at once, whatever its stall deadline", async () => {
    const stop = new AbortController();
    const source = fetchSource(stalling(0), 'http://models.test/tiny/', undefined, undefined, {
      stallMs: 60_000,
      signal: stop.signal,
    });
    const reading = source.read('tokenizer.json');
    stop.abort(new LoadTimeoutError('loading took longer than 10 ms (MODEL_LOAD_TIMEOUT_MS)'));
    await expect(reading).rejects.toThrow(/MODEL_LOAD_TIMEOUT_MS/);
  });

  it('a source that keeps sending is read whole, with deadlines or without', async () => {
    const bytes = Uint8Array.from({ length: 3 << 20 }, (_, i) => i % 251); // three 1 MiB chunks
    const fetcher = { fetch: async () => new Response(bytes) };
    for (const deadlines of [undefined, { stallMs: 1000 }]) {
      const source = fetchSource(fetcher, 'http://models.test/tiny/', undefined, undefined, deadlines);
      expect(Buffer.compare(Buffer.from((await source.read('model.bin'))!), Buffer.from(bytes))).toBe(0);
      const file = await source.stream!('model.bin');
      let at = 0;
      for await (const chunk of file!.chunks) {
        expect(Buffer.compare(Buffer.from(chunk), Buffer.from(bytes.subarray(at, at + chunk.length)))).toBe(0);
        at += chunk.length;
      }
      expect(at).toBe(bytes.length);
    }
  });
});

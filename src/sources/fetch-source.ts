import { oneChunk, seekable, type ModelSource } from '../engine/model/model-files.js';
import { sizedChunks } from './sized-chunks.js';
import { LoadTimeoutError, StallWatch, type LoadDeadlines } from './load-deadline.js';

/** Anything with a fetch: the global one, a static-assets binding, a service binding. */
export interface Fetcher {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}

/**
 * A model folder served over HTTP(S) or by a Workers static-assets binding, under `baseUrl`
 * (e.g. `https://assets.local/tiny/`). A 404 means the file does not exist; other failures throw.
 */
export function fetchSource(
  fetcher: Fetcher,
  baseUrl: string,
  where?: string,
  fix?: string,
  deadlines?: LoadDeadlines,
): ModelSource {
  const base = baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
  const watch = (what: string): StallWatch | undefined => deadlines && new StallWatch(deadlines, `${what} at ${base}`);
  // Each fetch (and each chunk of its body, below) waits at most the stall deadline.
  const fetchOnce = async (url: string, init: RequestInit, w: StallWatch | undefined): Promise<Response> => {
    if (!w) return fetcher.fetch(url, init);
    const res = await raced(fetcher.fetch(url, { ...init, signal: w.signal }), w).catch(named(w));
    w.touch();
    return res;
  };
  const get = async (path: string, w?: StallWatch): Promise<Response | null> => {
    const res = await fetchOnce(new URL(path, base).toString(), {}, w);
    if (res.ok) return res;
    // A body nobody reads holds its connection until it is collected: let it go now.
    await res.body?.cancel().catch(() => {});
    if (res.status === 404) return null;
    throw new Error(`fetching ${path} from ${base}: HTTP ${res.status}`);
  };
  return {
    where,
    fix,
    async exists(path) {
      // HEAD: a weights file is not read to learn that it is there.
      const w = watch(`checking ${path}`);
      const res = await fetchOnce(new URL(path, base).toString(), { method: 'HEAD' }, w).finally(() => w?.done());
      await res.body?.cancel().catch(() => {});
      if (res.ok) return true;
      if (res.status === 404) return false;
      if (res.status === 405 || res.status === 501) {
        // A server without HEAD: ask with GET and let the body go unread.
        const full = await get(path);
        await full?.body?.cancel().catch(() => {});
        return full !== null;
      }
      throw new Error(`checking ${path} at ${base}: HTTP ${res.status}`);
    },
    async read(path) {
      const w = watch(`fetching ${path}`);
      try {
        const res = await get(path, w);
        if (!res || !w || !res.body) return res && new Uint8Array(await res.arrayBuffer());
        const parts: Uint8Array[] = [];
        for await (const chunk of watched(sizedChunks(res.body), w)) parts.push(chunk);
        const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
        let at = 0;
        for (const part of parts) {
          bytes.set(part, at);
          at += part.length;
        }
        return bytes;
      } finally {
        w?.done();
      }
    },
    async stream(path) {
      const w = watch(`fetching ${path}`);
      const res = await get(path, w).catch((err: unknown) => {
        w?.done();
        throw err;
      });
      if (!res) {
        w?.done();
        return null;
      }
      const length = Number(res.headers.get('content-length') ?? NaN);
      const size = Number.isSafeInteger(length) ? length : undefined;
      if (!res.body) {
        w?.done();
        return { chunks: oneChunk(new Uint8Array(await res.arrayBuffer())), size };
      }
      const url = new URL(path, base).toString();
      // From `offset` on, with a Range request: a stage skipping the layers it does not hold fetches none of
      // them. A server that ignores Range (200, the whole file) is read through to the offset instead.
      async function* from(offset: number): AsyncGenerator<Uint8Array> {
        const rangeWatch = watch(`fetching ${path} from byte ${offset}`);
        const rest = await fetchOnce(url, { headers: { range: `bytes=${offset}-` } }, rangeWatch);
        if (!rest.ok || !rest.body) {
          await rest.body?.cancel().catch(() => {});
          throw new Error(`fetching ${path} from ${base} at byte ${offset}: HTTP ${rest.status}`);
        }
        let skip = rest.status === 206 ? 0 : offset;
        const body = rangeWatch ? watched(sizedChunks(rest.body), rangeWatch) : sizedChunks(rest.body);
        for await (const chunk of body) {
          if (skip >= chunk.length) {
            skip -= chunk.length;
            continue;
          }
          yield skip ? chunk.subarray(skip) : chunk;
          skip = 0;
        }
      }
      return { chunks: seekable(w ? watched(sizedChunks(res.body), w) : sizedChunks(res.body), from), size };
    },
  };
}

/** Rethrows a read's failure naming the read: a body cut short says only "Network connection lost". */
function named(w: StallWatch): (err: unknown) => never {
  return (err) => {
    if (err instanceof LoadTimeoutError) throw err;
    throw new Error(`${w.what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  };
}

/** `p`, or the watch's reason once it fires first. */
function raced<T>(p: Promise<T>, w: StallWatch): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const stop = (): void => reject(w.signal.reason);
    if (w.signal.aborted) return stop();
    w.signal.addEventListener('abort', stop, { once: true });
    p.then(resolve, reject).finally(() => w.signal.removeEventListener('abort', stop));
  });
}

/** `chunks`, each waited for at most the watch's stall deadline; the watch ends with them. */
async function* watched(chunks: AsyncGenerator<Uint8Array>, w: StallWatch): AsyncGenerator<Uint8Array> {
  let finished = false;
  try {
    for (;;) {
      const next = await raced(chunks.next(), w).catch(named(w));
      if (next.done) {
        finished = true;
        return;
      }
      w.touch();
      yield next.value;
    }
  } finally {
    w.done();
    // A stalled read may never settle: the generator is let go without waiting for it.
    if (!finished) void chunks.return(undefined).catch(() => {});
  }
}

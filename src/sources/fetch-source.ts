import { oneChunk, seekable, type ModelSource } from '../engine/model/model-files.js';
import { sizedChunks } from './sized-chunks.js';

/** Anything with a fetch: the global one, a static-assets binding, a service binding. */
export interface Fetcher {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}

/**
 * A model folder served over HTTP(S) or by a Workers static-assets binding, under `baseUrl`
 * (e.g. `https://assets.local/tiny/`). A 404 means the file does not exist; other failures throw.
 */
export function fetchSource(fetcher: Fetcher, baseUrl: string, where?: string, fix?: string): ModelSource {
  const base = baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
  const get = async (path: string): Promise<Response | null> => {
    const res = await fetcher.fetch(new URL(path, base).toString());
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
      const res = await fetcher.fetch(new URL(path, base).toString(), { method: 'HEAD' });
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
      const res = await get(path);
      return res && new Uint8Array(await res.arrayBuffer());
    },
    async stream(path) {
      const res = await get(path);
      if (!res) return null;
      const length = Number(res.headers.get('content-length') ?? NaN);
      const size = Number.isSafeInteger(length) ? length : undefined;
      if (!res.body) return { chunks: oneChunk(new Uint8Array(await res.arrayBuffer())), size };
      const url = new URL(path, base).toString();
      // From `offset` on, with a Range request: a stage skipping the layers it does not hold fetches none of
      // them. A server that ignores Range (200, the whole file) is read through to the offset instead.
      async function* from(offset: number): AsyncGenerator<Uint8Array> {
        const rest = await fetcher.fetch(url, { headers: { range: `bytes=${offset}-` } });
        if (!rest.ok || !rest.body) {
          await rest.body?.cancel().catch(() => {});
          throw new Error(`fetching ${path} from ${base} at byte ${offset}: HTTP ${rest.status}`);
        }
        let skip = rest.status === 206 ? 0 : offset;
        for await (const chunk of sizedChunks(rest.body)) {
          if (skip >= chunk.length) {
            skip -= chunk.length;
            continue;
          }
          yield skip ? chunk.subarray(skip) : chunk;
          skip = 0;
        }
      }
      return { chunks: seekable(sizedChunks(res.body), from), size };
    },
  };
}

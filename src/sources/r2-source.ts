import { seekable, type ModelSource } from '../engine/model/model-files.js';
import { sizedChunks } from './sized-chunks.js';

/** The part of an R2 bucket binding a model needs (also what miniflare's local R2 gives `wrangler dev`). */
export interface ObjectBucket {
  get(
    key: string,
    options?: { range?: { offset: number } },
  ): Promise<{ arrayBuffer(): Promise<ArrayBuffer>; body: ReadableStream<Uint8Array>; size: number } | null>;
  head(key: string): Promise<unknown>;
}

/**
 * A model folder stored in an R2 bucket under `<prefix>/` (keys `<prefix>/config.json`, `<prefix>/onnx/model_q4.onnx`, ...).
 * R2 has no 25 MiB per-file cap as static assets do, so real models live here (`npm run model:upload`).
 */
export function r2Source(bucket: ObjectBucket, prefix: string, where?: string): ModelSource {
  const base = prefix.replace(/\/+$/, '');
  return {
    where: where ?? `the R2 bucket under ${base}/`,
    async exists(path) {
      return (await bucket.head(`${base}/${path}`)) !== null;
    },
    async read(path) {
      const object = await bucket.get(`${base}/${path}`);
      return object ? new Uint8Array(await object.arrayBuffer()) : null;
    },
    async stream(path) {
      const key = `${base}/${path}`;
      const object = await bucket.get(key);
      if (!object) return null;
      // A ranged get from `offset` on: a stage skipping the layers it does not hold reads none of their bytes.
      async function* from(offset: number): AsyncGenerator<Uint8Array> {
        const rest = await bucket.get(key, { range: { offset } });
        if (!rest) throw new Error(`R2 ${key} went away while it was read`);
        yield* sizedChunks(rest.body);
      }
      return { chunks: seekable(sizedChunks(object.body), from), size: object.size };
    },
  };
}

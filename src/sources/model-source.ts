import type { ModelSource } from '../engine/model/model-files.js';
import { fetchSource, type Fetcher } from './fetch-source.js';
import { r2Source, type ObjectBucket } from './r2-source.js';

export interface ModelLocations {
  /** Model folders uploaded with `npm run model:upload` (no per-file size cap). */
  bucket?: ObjectBucket;
  /** The `./models` static-assets binding (files up to 25 MiB: the generated test models). */
  assets: Fetcher;
  /** A base URL serving the folder over HTTP(S) instead (e.g. a hub `resolve/<sha>/` URL or a file server). */
  url?: string;
  fetcher?: Fetcher;
}

/**
 * Where the server reads model `name` from: MODEL_URL when set; else the R2 bucket when it holds
 * `<name>/config.json`; else the static assets. One model, one place: its files are never mixed.
 */
export async function modelSourceFor(
  name: string,
  where: ModelLocations,
): Promise<{ source: ModelSource; from: string }> {
  if (where.url)
    return { source: fetchSource(where.fetcher ?? { fetch: (u) => fetch(u) }, where.url), from: where.url };
  if (where.bucket && (await where.bucket.head(`${name}/config.json`)))
    return { source: r2Source(where.bucket, name), from: `R2 ${name}/` };
  return { source: fetchSource(where.assets, `http://models.local/${name}/`), from: `assets ${name}/` };
}

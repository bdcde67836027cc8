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

/** Which of the three places a model was read from (a metric label: never the URL itself, which may hold a token). */
export type ModelSourceKind = 'url' | 'r2' | 'assets';

/**
 * Where the server reads model `name` from: MODEL_URL when set; else the R2 bucket when it holds
 * `<name>/config.json`; else the static assets. One model, one place: its files are never mixed.
 */
export async function modelSourceFor(
  name: string,
  where: ModelLocations,
): Promise<{ source: ModelSource; from: string; kind: ModelSourceKind }> {
  if (where.url)
    return {
      source: fetchSource(where.fetcher ?? { fetch: (u) => fetch(u) }, where.url),
      from: where.url,
      kind: 'url',
    };
  if (where.bucket && (await where.bucket.head(`${name}/config.json`)))
    return { source: r2Source(where.bucket, name), from: `R2 ${name}/`, kind: 'r2' };
  return { source: fetchSource(where.assets, `http://models.local/${name}/`), from: `assets ${name}/`, kind: 'assets' };
}

import type { ModelSource } from '../engine/model/model-files.js';
import { fetchSource, type Fetcher } from './fetch-source.js';
import { r2Source, type ObjectBucket } from './r2-source.js';
import type { LoadDeadlines } from './load-deadline.js';

export interface ModelLocations {
  /** Model folders uploaded with `npm run model:upload` (no per-file size cap). */
  bucket?: ObjectBucket;
  /** The `./models` static-assets binding (files up to 25 MiB: the generated test models). */
  assets: Fetcher;
  /** A base URL serving the folder over HTTP(S) instead (e.g. a hub `resolve/<sha>/` URL or a file server). */
  url?: string;
  fetcher?: Fetcher;
  /** Deadlines on each read over HTTP (MODEL_URL, the assets): a stalled source fails the load instead of holding it. */
  deadlines?: LoadDeadlines;
}

/** Which of the three places a model was read from (a metric label: never the URL itself, which may hold a token). */
export type ModelSourceKind = 'url' | 'r2' | 'assets';

/** What to do when model `name` is in none of the places: the commands that put a folder there. */
export function modelFolderFix(name: string): string {
  return (
    `put the folder in ./models (npm run model:import -- gguf|safetensors|llama2c <file> --out models/${name}, ` +
    `or npm run model:pull -- <org>/<repo> --out models/${name}); a folder with files over the 25 MiB asset cap ` +
    `goes to R2 (npm run model:upload -- models/${name}); or set MODEL to a folder that exists`
  );
}

/**
 * Where the server reads model `name` from: MODEL_URL when set; else the R2 bucket when it holds
 * `<name>/config.json`; else the static assets. One model, one place: its files are never mixed. Each source
 * says where it is (`where`), and the assets' also where else was searched, so a missing folder's refusal
 * names every place and the fix (model-files.ts, missingFile) without a request more.
 */
export async function modelSourceFor(
  name: string,
  where: ModelLocations,
): Promise<{ source: ModelSource; from: string; kind: ModelSourceKind }> {
  if (where.url)
    return {
      source: fetchSource(
        where.fetcher ?? { fetch: (u, init) => fetch(u, init) },
        where.url,
        'the folder MODEL_URL names',
        "point MODEL_URL at a folder holding config.json, the tokenizer files and the weights (a hub repo's .../resolve/<revision>/, or a folder model:pull wrote, on any HTTP server), or unset it to read the R2 bucket and ./models",
        where.deadlines,
      ),
      from: where.url,
      kind: 'url',
    };
  if (where.bucket && (await where.bucket.head(`${name}/config.json`)))
    return {
      source: r2Source(where.bucket, name, `the R2 bucket (MODEL_BUCKET) under ${name}/`),
      from: `R2 ${name}/`,
      kind: 'r2',
    };
  const searched = where.bucket ? `the R2 bucket (MODEL_BUCKET) has no ${name}/config.json` : 'no R2 bucket is bound';
  return {
    source: fetchSource(
      where.assets,
      `http://models.local/${name}/`,
      `static assets models/${name}/ (searched first: MODEL_URL is not set; ${searched})`,
      modelFolderFix(name),
      where.deadlines,
    ),
    from: `assets ${name}/`,
    kind: 'assets',
  };
}

// Puts a model folder into the R2 bucket the server reads real models from (binding MODEL_BUCKET,
// bucket edge-infer-models, keys `<name>/<file>`), through wrangler's own `r2 object put`.
//
//   npm run model:upload -- <folder> [--name N] [--dtype q4] [--remote] [--persist-to DIR]
//
// Default is the local bucket that `npm start` (wrangler dev) reads, kept in .wrangler/state (or DIR),
// written through wrangler's own miniflare in one instance (as `wrangler r2 object put --local` does,
// without starting it once per file). --remote uploads to the account's real bucket with
// `wrangler r2 object put --remote` (wrangler login; wrangler caps one upload at 300 MiB).
// Static assets cap files at 25 MiB, which is why models bigger than the test ones go here.
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { weightsFileFor, type ModelDtype } from '../src/engine/model/model-files.js';
import { answerHelp } from './lib/help.js';

export const MODEL_BUCKET = 'edge-infer-models';
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const USAGE = 'Usage: npm run model:upload -- <folder> [--name N] [--dtype q4] [--remote] [--persist-to DIR]';
const FOLDER_FILES = [
  'config.json',
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
];

export interface UploadOptions {
  folder: string;
  name: string;
  dtype?: string;
  remote: boolean;
  persistTo?: string;
}

export function parseUploadArgs(argv: readonly string[]): UploadOptions {
  const [folder, ...rest] = argv;
  if (!folder || folder.startsWith('--')) throw new Error(USAGE);
  const opts: UploadOptions = { folder, name: basename(resolve(folder)), remote: false };
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i];
    if (flag === '--remote') opts.remote = true;
    else if (['--name', '--dtype', '--persist-to'].includes(flag)) {
      const value = rest[++i];
      if (value === undefined) throw new Error(`${flag} needs a value\n${USAGE}`);
      if (flag === '--name') opts.name = value;
      else if (flag === '--dtype') opts.dtype = value;
      else opts.persistTo = value;
    } else throw new Error(`unknown option ${flag}\n${USAGE}`);
  }
  if (!/^[\w.-]+$/.test(opts.name))
    throw new Error(`--name ${JSON.stringify(opts.name)}: use letters, digits, '.', '_' and '-'`);
  return opts;
}

/** The files the server reads: config and tokenizer files, and the ONNX graph(s). */
export function filesToUpload(folder: string, dtype?: string): string[] {
  if (!existsSync(join(folder, 'config.json'))) throw new Error(`${folder} has no config.json: not a model folder`);
  const rawConfig = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as Record<string, unknown>;
  // A GGUF folder (model:import gguf, model:pull of a GGUF repo) holds its weights in the file config.json names.
  const gguf = weightsFileFor('gguf', rawConfig);
  const graphs = dtype
    ? [weightsFileFor(dtype as ModelDtype, rawConfig)]
    : [
        ...(existsSync(join(folder, 'onnx'))
          ? readdirSync(join(folder, 'onnx'))
              .filter((f) => /^model(_[a-z0-9]+)?\.onnx$/.test(f))
              .map((f) => `onnx/${f}`)
          : []),
        ...(existsSync(join(folder, gguf)) ? [gguf] : []),
      ];
  for (const g of graphs) if (!existsSync(join(folder, g))) throw new Error(`${folder} has no ${g}`);
  if (graphs.length === 0) throw new Error(`${folder} has no onnx/model*.onnx and no ${gguf}`);
  return [...FOLDER_FILES.filter((f) => existsSync(join(folder, f))), ...graphs];
}

const wranglerPackage = () => createRequire(import.meta.url).resolve('wrangler/package.json');

export interface LocalBucket {
  put(key: string, value: ArrayBuffer): Promise<unknown>;
  createMultipartUpload(key: string): Promise<{
    uploadPart(part: number, value: ArrayBuffer): Promise<{ partNumber: number; etag: string }>;
    complete(parts: { partNumber: number; etag: string }[]): Promise<unknown>;
  }>;
}

/**
 * Files past this go to the local bucket in parts of this size: miniflare's proxy carries a value as one base64
 * string, and V8's strings stop at 512 MiB (bench-1b's q4 file is 862 MiB).
 */
const PART_BYTES = 128 * 2 ** 20;

/** Puts one file into the local bucket: whole, or a multipart upload of PART_BYTES parts read one at a time. */
async function putLocal(bucket: LocalBucket, key: string, path: string): Promise<void> {
  const size = statSync(path).size;
  if (size <= PART_BYTES) {
    // A whole ArrayBuffer: miniflare's proxy refuses views into Node's shared Buffer pool.
    const bytes = readFileSync(path);
    await bucket.put(key, bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer);
    return;
  }
  const upload = await bucket.createMultipartUpload(key);
  const parts: { partNumber: number; etag: string }[] = [];
  const fd = openSync(path, 'r');
  try {
    for (let offset = 0, part = 1; offset < size; offset += PART_BYTES, part++) {
      const chunk = new Uint8Array(Math.min(PART_BYTES, size - offset));
      for (let read = 0; read < chunk.length; ) read += readSync(fd, chunk, read, chunk.length - read, offset + read);
      parts.push(await upload.uploadPart(part, chunk.buffer));
    }
  } finally {
    closeSync(fd);
  }
  await upload.complete(parts);
}

/** The local R2 bucket `wrangler dev --persist-to <root>` sees (wrangler keeps local state under <root>/v3). */
export async function withLocalBucket<T>(persistRoot: string, use: (bucket: LocalBucket) => Promise<T>): Promise<T> {
  // miniflare is wrangler's own dependency: resolved from wrangler, it is the version wrangler dev runs.
  const { Miniflare } = (await import(pathToFileURL(createRequire(wranglerPackage()).resolve('miniflare')).href)) as {
    Miniflare: new (
      opts: Record<string, unknown>,
    ) => { getR2Bucket(name: string): Promise<LocalBucket>; dispose(): Promise<void> };
  };
  const mf = new Miniflare({
    modules: true,
    script: 'export default { fetch() { return new Response(null, { status: 404 }); } }',
    defaultPersistRoot: join(persistRoot, 'v3'),
    r2Buckets: { BUCKET: MODEL_BUCKET },
  });
  try {
    return await use(await mf.getR2Bucket('BUCKET'));
  } finally {
    await mf.dispose();
  }
}

export async function uploadModel(opts: UploadOptions, log: (line: string) => void = console.log): Promise<void> {
  const files = filesToUpload(opts.folder, opts.dtype);
  const done = (file: string) =>
    log(
      `${(statSync(join(opts.folder, file)).size / 2 ** 20).toFixed(1).padStart(8)} MiB  ${MODEL_BUCKET}/${opts.name}/${file}`,
    );
  if (!opts.remote) {
    await withLocalBucket(resolve(opts.persistTo ?? join(ROOT, '.wrangler', 'state')), async (bucket) => {
      for (const file of files) {
        await putLocal(bucket, `${opts.name}/${file}`, join(opts.folder, file));
        done(file);
      }
    });
    return;
  }
  const wrangler = join(dirname(wranglerPackage()), 'bin', 'wrangler.js');
  for (const file of files) {
    const path = join(opts.folder, file);
    const args = [
      wrangler,
      'r2',
      'object',
      'put',
      `${MODEL_BUCKET}/${opts.name}/${file}`,
      '--file',
      resolve(path),
      '--remote',
    ];
    const run = spawnSync(process.execPath, args, {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', NO_COLOR: '1' },
    });
    if (run.status !== 0)
      throw new Error(`wrangler r2 object put ${file} failed (${run.status}):\n${run.stderr || run.stdout}`);
    done(file);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(USAGE);
  try {
    const opts = parseUploadArgs(process.argv.slice(2));
    await uploadModel(opts);
    console.log(
      `uploaded ${opts.folder} as ${opts.name} to the ${opts.remote ? 'remote' : 'local'} R2 bucket ${MODEL_BUCKET}; serve it with: MODEL=${opts.name} npm start`,
    );
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}

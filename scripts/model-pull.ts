// Downloads a model from the Hugging Face hub into a model folder the server can serve: an ONNX export as it
// is, or a safetensors checkpoint converted on arrival by model:import's importer (scripts/import/pull.ts).
//
//   npm run model:pull -- <org>/<repo> [--revision R] [--file onnx/model_q4.onnx]... [--dtype q4[,int8...]|all]
//                         [--format onnx|safetensors] [--out models/<name>]
//
// --dtype: for a safetensors repo the dtypes to convert to (default q4); for an ONNX repo the
// onnx/model_<dtype>.onnx graphs to fetch. --format picks the source when a repo holds both.
// HF_TOKEN (gated/private repos) and HF_ENDPOINT (a mirror) are read from the environment. Interrupted
// downloads resume; every file is checksummed. See scripts/import/hub-client.ts.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ignoreLargeModelFolders } from './import/assets-ignore.js';
import { progressPrinter } from './import/progress.js';
import { answerHelp } from './lib/help.js';
import { pullModel, REPO_FORMATS, type PullOptions, type RepoFormat } from './import/pull.js';

const USAGE =
  'Usage: npm run model:pull -- <org>/<repo> [--revision R] [--file onnx/model_q4.onnx]... [--dtype q4[,int8...]|all] [--format onnx|safetensors] [--out models/<name>]';

export function parsePullArgs(argv: readonly string[]): PullOptions {
  const [repo, ...rest] = argv;
  if (!repo || repo.startsWith('--')) throw new Error(USAGE);
  const files: string[] = [];
  let revision: string | undefined;
  let outDir: string | undefined;
  let dtypes: string[] | undefined;
  let format: RepoFormat | undefined;
  for (let i = 0; i < rest.length; i += 2) {
    const value = rest[i + 1];
    if (value === undefined) throw new Error(`${rest[i]} needs a value\n${USAGE}`);
    if (rest[i] === '--file') files.push(value);
    else if (rest[i] === '--revision') revision = value;
    else if (rest[i] === '--out') outDir = value;
    else if (rest[i] === '--dtype') dtypes = value === 'all' ? ['fp32', 'fp16', 'int8', 'q4'] : value.split(',');
    else if (rest[i] === '--format') {
      if (!(REPO_FORMATS as readonly string[]).includes(value))
        throw new Error(`--format is one of ${REPO_FORMATS.join(', ')}\n${USAGE}`);
      format = value as RepoFormat;
    } else throw new Error(`unknown option ${rest[i]}\n${USAGE}`);
  }
  return {
    repo,
    revision,
    files,
    dtypes,
    format,
    outDir: outDir ?? join('models', repo.split('/')[1].toLowerCase()),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(USAGE);
  try {
    const opts = parsePullArgs(process.argv.slice(2));
    const r = await pullModel({ ...opts, onProgress: progressPrinter(), onStage: (m) => console.error(m) });
    const MiB = 2 ** 20;
    console.log(
      `pulled ${opts.repo}@${r.sha.slice(0, 12)} into ${opts.outDir} (${r.files.filter((f) => f.status === 'downloaded').length} downloaded, ${r.files.filter((f) => f.status === 'present').length} already there)`,
    );
    if (r.written.length) console.log(`converted the ${r.format} checkpoint with model:import's importer:`);
    for (const f of r.written) console.log(`${(f.bytes / MiB).toFixed(1).padStart(8)} MiB  ${f.file}`);
    console.log(
      `memory: weights ${(r.weightBytes / MiB).toFixed(1)} MiB + KV cache ${(r.kvBytesPerToken / 1024).toFixed(1)} KiB per token (float32 pool)`,
    );
    const name = opts.outDir.replace(/\/+$/, '').split('/').pop();
    const models = fileURLToPath(new URL('../models', import.meta.url));
    if (dirname(resolve(opts.outDir)) === resolve(models)) ignoreLargeModelFolders(models);
    console.log(
      `serve it: npm run model:upload -- ${opts.outDir} --dtype ${r.dtypes[0]} && MODEL=${name} MODEL_DTYPE=${r.dtypes[0]} npm start`,
    );
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}

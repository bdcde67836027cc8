// Downloads an ONNX export from the Hugging Face hub into a model folder the server can serve.
//
//   npm run model:pull -- <org>/<repo> [--revision R] [--file onnx/model_q4.onnx]... [--out models/<name>]
//
// HF_TOKEN (gated/private repos) and HF_ENDPOINT (a mirror) are read from the environment. Interrupted
// downloads resume; every file is checksummed. See scripts/import/hub-client.ts.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ignoreLargeModelFolders } from './import/assets-ignore.js';
import { progressPrinter } from './import/progress.js';
import { pullModel, type PullOptions } from './import/pull.js';

const USAGE = 'usage: model:pull -- <org>/<repo> [--revision R] [--file onnx/model_q4.onnx]... [--out models/<name>]';

export function parsePullArgs(argv: readonly string[]): PullOptions {
  const [repo, ...rest] = argv;
  if (!repo || repo.startsWith('--')) throw new Error(USAGE);
  const files: string[] = [];
  let revision: string | undefined;
  let outDir: string | undefined;
  for (let i = 0; i < rest.length; i += 2) {
    const value = rest[i + 1];
    if (value === undefined) throw new Error(`${rest[i]} needs a value\n${USAGE}`);
    if (rest[i] === '--file') files.push(value);
    else if (rest[i] === '--revision') revision = value;
    else if (rest[i] === '--out') outDir = value;
    else throw new Error(`unknown option ${rest[i]}\n${USAGE}`);
  }
  return { repo, revision, files, outDir: outDir ?? join('models', repo.split('/')[1].toLowerCase()) };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  try {
    const opts = parsePullArgs(process.argv.slice(2));
    const r = await pullModel({ ...opts, onProgress: progressPrinter() });
    const MiB = 2 ** 20;
    console.log(
      `pulled ${opts.repo}@${r.sha.slice(0, 12)} into ${opts.outDir} (${r.files.filter((f) => f.status === 'downloaded').length} downloaded, ${r.files.filter((f) => f.status === 'present').length} already there)`,
    );
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

// What `npm run deploy` uploads as static assets: the served model's files only (its chosen weights, config and
// tokenizer files), and the draft model's when DRAFT_MODEL names one, copied into a generated directory that
// the deploy's config points [assets] at. ./models holds every imported folder in every dtype; uploading it
// whole shipped files no deployed worker reads. A staged copy rather than a generated .assetsignore: that file
// lives in ./models, which `npm start` serves from and other checkouts may share, and it would have to list
// everything the deploy leaves out; the staged directory lists what it keeps.
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { chooseWeights } from '../../src/engine/model/default-weights.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { ASSET_LIMIT_BYTES } from '../import/assets-ignore.js';
import { filesToUpload } from '../model-upload.js';

/** Where the deploy stages its assets (gitignored), beside wrangler.toml. */
export const DEPLOY_ASSETS_DIR = '.deploy-assets';

export interface StagedFile {
  /** Its path under the assets directory: `<model>/<file>`. */
  path: string;
  bytes: number;
}

export interface AssetPlan {
  files: StagedFile[];
  totalBytes: number;
  /** What the deploy serves from elsewhere, for its log (a model read from MODEL_URL or R2). */
  notes: string[];
}

/** One model folder's files the server reads: config and tokenizer files and the weights the folder rule chooses. */
async function modelFiles(modelsDir: string, name: string, dtype: string | undefined, variable: string) {
  const dir = join(modelsDir, name);
  const rawConfig = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const weights = await chooseWeights(directorySource(dir, `models/${name}/`), rawConfig, dtype, 'MODEL_DTYPE');
  return filesToUpload(dir, weights.dtype).map((file) => {
    const bytes = statSync(join(dir, file)).size;
    if (bytes > ASSET_LIMIT_BYTES)
      throw new Error(
        `${variable}=${name}: models/${name}/${file} is ${(bytes / 2 ** 20).toFixed(1)} MiB, over the 25 MiB a static asset may be. ` +
          `Put the model in R2 instead: npm run model:upload -- models/${name} --dtype ${weights.dtype} --remote, ` +
          'then npm run deploy -- --model-in-r2 (the worker reads the R2 bucket before its assets)',
      );
    return { path: `${name}/${file}`, bytes };
  });
}

/**
 * The assets a deploy of `vars` (wrangler.toml's [vars] with the deploy's --vars over them) uploads, from
 * `modelsDir`: the served model's files unless MODEL_URL serves it or `modelInR2` says R2 does, and the draft
 * model's (which lives beside the target: R2 or the assets). Throws, naming the R2 command, for a file past
 * the static-asset limit.
 */
export async function deployAssets(
  modelsDir: string,
  vars: Record<string, string>,
  modelInR2 = false,
): Promise<AssetPlan> {
  const name = vars.MODEL_NAME?.trim() || vars.MODEL?.trim() || '';
  const files: StagedFile[] = [];
  const notes: string[] = [];
  if (vars.MODEL_URL?.trim()) notes.push(`MODEL=${name} is read from MODEL_URL: none of its files are assets`);
  else if (modelInR2)
    notes.push(`MODEL=${name} is read from the R2 bucket (--model-in-r2): none of its files are assets`);
  else if (!existsSync(join(modelsDir, name, 'config.json')))
    throw new Error(
      `MODEL=${name}: there is no models/${name}/config.json to deploy. Make or import the folder there, or upload it to R2 ` +
        `(npm run model:upload -- <folder> --name ${name} --remote) and deploy with --model-in-r2`,
    );
  else files.push(...(await modelFiles(modelsDir, name, vars.MODEL_DTYPE?.trim() || undefined, 'MODEL')));
  const draft = vars.DRAFT_MODEL?.trim();
  // The server looks for the draft in the R2 bucket, then the assets (never MODEL_URL): a local one ships.
  if (draft && existsSync(join(modelsDir, draft, 'config.json')))
    files.push(...(await modelFiles(modelsDir, draft, undefined, 'DRAFT_MODEL')));
  else if (draft) notes.push(`DRAFT_MODEL=${draft} is not in ./models: the worker must find it in the R2 bucket`);
  return { files, totalBytes: files.reduce((n, f) => n + f.bytes, 0), notes };
}

/** Copies the plan's files from `modelsDir` into `outDir` (emptied first): the directory the deploy uploads. */
export function stageAssets(modelsDir: string, plan: AssetPlan, outDir: string): void {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  for (const { path } of plan.files) {
    mkdirSync(dirname(join(outDir, path)), { recursive: true });
    copyFileSync(join(modelsDir, path), join(outDir, path));
  }
}

/** wrangler.toml with [assets] reading `dir` instead of ./models. */
export function withAssetsDirectory(toml: string, dir: string): string {
  const replaced = toml.replace(/^(\[assets\][^[]*?^directory = )"[^"]*"/m, `$1"./${dir}"`);
  if (replaced === toml) throw new Error('wrangler.toml has no [assets] directory to point at the staged model');
  return replaced;
}

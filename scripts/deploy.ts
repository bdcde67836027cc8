// `npm run deploy`: `wrangler deploy` with production settings (see docs/deploy.md). A deployed worker with
// no API_KEYS secret would run in dev mode and serve anyone, so that is refused unless --allow-open says
// it is meant. `npm run deploy -- --dry-run --outdir <dir>` bundles without an account (what CI checks).
// PIPELINE_STAGES=N (the environment, or --var PIPELINE_STAGES:N): the N stage Workers first, each from its
// generated config (scripts/lib/stage-configs.ts), then the head, whose config binds their objects by script name.
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import {
  DEPLOY_CONFIG,
  deployArgs,
  deployExtra,
  deployStages,
  hasApiKeysSecret,
  hasSecret,
  hasConfigFlag,
  KERNELS_ONLY_CONFIG,
  kernelsOnlyConfig,
  stageDeployArgs,
  uploadSizes,
} from './deploy-args.js';
import {
  type AssetPlan,
  DEPLOY_ASSETS_DIR,
  deployAssets,
  stageAssets,
  withAssetsDirectory,
} from './lib/deploy-assets.js';
import { startVars } from './start-args.js';
import { headConfigFile, stageConfigFile, varsOfArgs, writePipelineConfigs } from './lib/stage-configs.js';
import { answerHelp } from './lib/help.js';
import { deployNeeds, planVerdict } from './lib/deploy-report.js';
import { checkModel, ModelCheckError } from './lib/model-check.js';
import { ensureModels } from './ensure-models.js';

answerHelp(`Usage: npm run deploy -- [--dry-run --outdir DIR] [--kernels-only] [--model-in-r2] [--allow-open] [--var NAME:VALUE]... [wrangler deploy's options]
Deploys the Worker with production settings (wrangler deploy). Refuses a Worker with no API_KEYS secret
unless --allow-open. --dry-run bundles without an account and reports the upload's size against the free
(3 MB gzip) and paid (10 MB) plans, the secrets and bindings a deploy needs, and the model check's verdict.
--kernels-only leaves onnxruntime-web out (the edge kernels serve every model they cover). PIPELINE_STAGES=N
(environment or --var) deploys N stage Workers and the head. See docs/deploy.md.`);
ensureModels();
const extra = deployExtra(process.env, process.argv.slice(2));
const wrangler = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');
const root = fileURLToPath(new URL('..', import.meta.url));
const vars = varsOfArgs(extra);

let stages: number;
try {
  stages = deployStages(extra);
} catch (err) {
  console.error((err as Error).message);
  process.exit(1);
}
if (stages > 0 && hasConfigFlag(extra)) {
  console.error('PIPELINE_STAGES: the head and stage configs are generated from wrangler.toml; drop -c/--config');
  process.exit(1);
}

// The head's secrets only: a stage has no public route (workers_dev = false, and its fetch answers 404).
if (!extra.includes('--dry-run') && !extra.includes('--allow-open')) {
  const list = spawnSync(process.execPath, [wrangler, 'secret', 'list', '--format', 'json'], { encoding: 'utf8' });
  if (list.status !== 0 || !hasApiKeysSecret(list.stdout)) {
    console.error(
      list.status !== 0
        ? `could not list the worker's secrets (not logged in, or a first deploy?):\n${list.stderr.trim()}\n`
        : 'the worker has no API_KEYS secret: deployed like this it would accept every request.\n',
    );
    console.error('Set the keys first:  npx wrangler secret put API_KEYS   (comma-separated bearer keys)');
    console.error('or, to deploy an open service on purpose:  npm run deploy -- --allow-open');
    process.exit(1);
  }
}

// A GPU host (GPU_HOST_URL) answers only calls that carry its secret: one set as a var would show in the dashboard.
if (vars.GPU_HOST_URL?.trim() && !extra.includes('--dry-run')) {
  const list = spawnSync(process.execPath, [wrangler, 'secret', 'list', '--format', 'json'], { encoding: 'utf8' });
  if (list.status !== 0 || !hasSecret(list.stdout, 'GPU_HOST_SECRET')) {
    console.error('GPU_HOST_URL is set but the worker has no GPU_HOST_SECRET secret: the GPU host would refuse it.');
    console.error('Set the secret the host runs with:  npx wrangler secret put GPU_HOST_SECRET');
    process.exit(1);
  }
}

const wranglerToml = readFileSync(join(root, 'wrangler.toml'), 'utf8');
const dryRun = extra.includes('--dry-run');
const modelInR2 = extra.includes('--model-in-r2');
const deployVars = { ...startVars(wranglerToml, []), ...vars };
// The start check's verdict, with the server's rules: what npm start refuses, the deployed Worker would refuse at
// its first request. A model only in the account's bucket (--model-in-r2, not uploaded locally) is not seen here.
try {
  const report = await checkModel(
    { ...deployVars, ...(stages > 0 ? { PIPELINE_STAGES: String(stages) } : {}) },
    { modelsDir: join(root, 'models'), persistRoot: join(root, '.wrangler', 'state'), root },
  );
  console.log('edge-infer: the start check passes the model:');
  for (const line of report) console.log(`  ${line}`);
} catch (err) {
  if (!(err instanceof ModelCheckError)) throw err;
  const elsewhere = modelInR2 && /no model folder found/.test(err.message);
  console.error(
    `edge-infer: ${elsewhere ? 'not checked here (--model-in-r2: the account bucket is not read): ' : ''}${err.message}`,
  );
  if (!elsewhere) process.exit(1);
}
if (dryRun) {
  console.log('edge-infer: a real deploy needs:');
  const model = deployVars.MODEL_NAME || deployVars.MODEL;
  for (const need of deployNeeds({ modelInR2, allowOpen: extra.includes('--allow-open'), model }))
    console.log(`  ${need}`);
}
// The assets: the served model's files alone, staged into DEPLOY_ASSETS_DIR, unless the user's own config or
// --assets chooses them.
const ownAssets = hasConfigFlag(extra) || extra.some((a) => a === '--assets' || a.startsWith('--assets='));
let toml = wranglerToml;
if (!ownAssets) {
  const modelsDir = join(root, 'models');
  let plan: AssetPlan;
  try {
    plan = await deployAssets(modelsDir, { ...startVars(wranglerToml, []), ...vars }, extra.includes('--model-in-r2'));
  } catch (err) {
    console.error(`edge-infer: ${(err as Error).message}`);
    process.exit(1);
  }
  stageAssets(modelsDir, plan, join(root, DEPLOY_ASSETS_DIR));
  for (const note of plan.notes) console.log(`edge-infer: ${note}`);
  console.log(
    `edge-infer: assets ${DEPLOY_ASSETS_DIR}/: ${plan.files.length} files, ${plan.totalBytes.toLocaleString('en')} bytes` +
      `${plan.files.length ? ` (${plan.files.map((f) => f.path).join(', ')})` : ''}`,
  );
  toml = withAssetsDirectory(wranglerToml, DEPLOY_ASSETS_DIR);
}
const kernelsOnly = extra.includes('--kernels-only');
/** Each `wrangler deploy`, in order, with what it deploys: the stages first, then the head. */
const runs: { what: string; args: string[] }[] = [];
/** The configs written for this deploy, removed after it: the --kernels-only copy, or the pipeline's. */
const written = [KERNELS_ONLY_CONFIG];
if (stages > 0) {
  const files = writePipelineConfigs(root, toml, stages, vars);
  written.push(...files);
  // The alias table goes after [vars], which writePipelineConfigs needs last: so on the written configs. The
  // stage entry imports no onnxruntime-web (src/objects/stage-runtime.ts), so for a stage it changes nothing.
  if (kernelsOnly)
    for (const file of files)
      writeFileSync(join(root, file), kernelsOnlyConfig(readFileSync(join(root, file), 'utf8')));
  for (let i = 1; i <= stages; i++)
    runs.push({ what: `stage ${i} of ${stages}`, args: stageDeployArgs(extra, i, stageConfigFile(i)) });
  runs.push({ what: 'the head', args: deployArgs(extra, headConfigFile) });
} else {
  if (kernelsOnly) writeFileSync(join(root, KERNELS_ONLY_CONFIG), kernelsOnlyConfig(toml));
  else if (!ownAssets) {
    writeFileSync(join(root, DEPLOY_CONFIG), toml);
    written.push(DEPLOY_CONFIG);
  }
  runs.push({ what: 'the worker', args: deployArgs(extra, kernelsOnly || ownAssets ? undefined : DEPLOY_CONFIG) });
}

/** Runs wrangler, its output passed through as it comes; resolves with its exit code and what it printed. */
function wranglerRun(args: string[]): Promise<{ code: number; log: string }> {
  const child = spawn(process.execPath, [wrangler, ...args], { stdio: ['inherit', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (chunk: Buffer) => {
    process.stdout.write(chunk);
    log += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    process.stderr.write(chunk);
    log += chunk.toString();
  });
  return new Promise((resolve) =>
    child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), log })),
  );
}

let code = 0;
try {
  for (const { what, args } of runs) {
    if (runs.length > 1) console.log(`npm run deploy: ${what} (${args[args.indexOf('--config') + 1]})`);
    const run = await wranglerRun(args);
    code = run.code;
    const sizes = uploadSizes(run.log);
    if (sizes.gzipKib !== undefined)
      console.log(
        `edge-infer: ${what}: bundle ${sizes.totalKib?.toLocaleString('en')} KiB, gzip ${sizes.gzipKib.toLocaleString('en')} KiB` +
          `${sizes.assetEntries === undefined ? '' : `; ${sizes.assetEntries} assets read (files and folders)`} (as wrangler reports them)`,
      );
    if (sizes.gzipKib !== undefined) console.log(`edge-infer: ${what}: ${planVerdict(sizes.gzipKib, kernelsOnly)}`);
    if (code !== 0) {
      if (what.startsWith('stage')) console.error(`npm run deploy: ${what} failed; the head was not deployed`);
      break;
    }
  }
} finally {
  for (const file of written) rmSync(join(root, file), { force: true });
  rmSync(join(root, DEPLOY_ASSETS_DIR), { recursive: true, force: true });
}
process.exit(code);

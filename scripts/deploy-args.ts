import { join } from 'node:path';
import { pipelineStagesVar, type Env } from '../src/env.js';
import { varsOfArgs } from './lib/stage-configs.js';

/** Flags `npm run deploy` understands itself; the rest go to `wrangler deploy` as they are. */
export const OWN_FLAGS = ['--allow-open', '--kernels-only', '--model-in-r2'] as const;

/**
 * `--kernels-only`: wrangler.toml plus an [alias] table that swaps onnxruntime-web for
 * src/backends/onnxruntime-absent.ts, so its 14 MB wasm leaves the upload and the edge kernels serve every
 * model they cover (others are refused by name). A config table, not `--alias`: wrangler 4.86 ignores the
 * flag when bundling for deploy (measured: the upload stays 3.7 MiB gzip).
 */
export function kernelsOnlyConfig(wranglerToml: string): string {
  const alias = ['onnxruntime-web/wasm', 'onnxruntime-web/ort-wasm-simd-threaded.wasm'].map(
    (m) => `"${m}" = "./src/backends/onnxruntime-absent.ts"`,
  );
  return `${wranglerToml.trimEnd()}\n\n# Written by npm run deploy -- --kernels-only\n[alias]\n${alias.join('\n')}\n`;
}

/** Where --kernels-only writes its config: beside wrangler.toml, whose relative paths it keeps. */
export const KERNELS_ONLY_CONFIG = 'wrangler.kernels-only.toml';

/** The config a plain deploy runs: wrangler.toml with [assets] on the staged model (scripts/lib/deploy-assets.ts). */
export const DEPLOY_CONFIG = 'wrangler.deploy.toml';

/** What wrangler's dry run or deploy says it uploads: the bundle's KiB and gzip KiB, and the assets it read. */
export function uploadSizes(log: string): { totalKib?: number; gzipKib?: number; assetEntries?: number } {
  const upload = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(log);
  const assets = /Read (\d+) files? from the assets directory/.exec(log);
  return {
    totalKib: upload ? Number(upload[1]) : undefined,
    gzipKib: upload ? Number(upload[2]) : undefined,
    assetEntries: assets ? Number(assets[1]) : undefined,
  };
}

/**
 * Vars a deployment must not inherit from wrangler.toml's dev defaults: loopback webhook callbacks are for
 * `wrangler dev`'s local receivers only.
 */
export const PRODUCTION_VARS: Record<string, string> = { ALLOW_LOOPBACK_CALLBACKS: 'false' };

/**
 * `wrangler deploy`'s arguments: production vars first (a user's own --var after them wins), then the user's flags.
 * `config`: the config to deploy (the pipeline's head); else wrangler.toml, or its --kernels-only copy.
 */
export function deployArgs(extra: readonly string[], config?: string): string[] {
  const args = ['deploy'];
  for (const [name, value] of Object.entries(PRODUCTION_VARS)) args.push('--var', `${name}:${value}`);
  const file = config ?? (extra.includes('--kernels-only') ? KERNELS_ONLY_CONFIG : undefined);
  if (file) args.push('--config', file);
  return [...args, ...extra.filter((a) => !(OWN_FLAGS as readonly string[]).includes(a))];
}

/**
 * The arguments `npm run deploy` acts on: PIPELINE_STAGES from the environment (as `npm start` takes it), then the
 * user's flags, so a `--var PIPELINE_STAGES:N` of theirs wins. Only that var: the model's come as `--var`s.
 */
export function deployExtra(env: NodeJS.ProcessEnv, extra: readonly string[]): string[] {
  return env.PIPELINE_STAGES ? ['--var', `PIPELINE_STAGES:${env.PIPELINE_STAGES}`, ...extra] : [...extra];
}

/** How many stage Workers the deploy's flags ask for (the head's rule: 0..64, 0 when unset); throws naming a bad value. */
export function deployStages(extra: readonly string[]): number {
  return pipelineStagesVar({ PIPELINE_STAGES: varsOfArgs(extra).PIPELINE_STAGES } as Env);
}

/**
 * `wrangler deploy` flags that are the head's alone, not a stage's: its vars (a stage's are baked into its config
 * by writePipelineConfigs), name, public routes, assets and secrets. Each takes a value (or, an array, several).
 * The outputs (--outdir, --outfile, --metafile) are the head's too; a stage writes to `<outdir>/stage-<i>`.
 */
const HEAD_ONLY_FLAGS = [
  '--var',
  '--name',
  '--routes',
  '--route',
  '--domains',
  '--domain',
  '--triggers',
  '--schedule',
  '--schedules',
  '--assets',
  '--secrets-file',
  '--outdir',
  '--outfile',
  '--metafile',
];

/** Flags that pick the config: a pipeline's are generated from wrangler.toml, so a user's cannot apply. */
export const CONFIG_FLAGS = ['-c', '--config'];

/** Whether the user's flags choose a config of their own (`-c`, `--config`, `--config=…`). */
export const hasConfigFlag = (extra: readonly string[]): boolean =>
  extra.some((a) => CONFIG_FLAGS.includes(a) || CONFIG_FLAGS.some((f) => a.startsWith(`${f}=`)));

/**
 * `wrangler deploy`'s arguments for pipeline stage `i` (its config `config`): the user's flags that apply to any
 * Worker (--dry-run, --minify, --compatibility-date, --tag, --message, --keep-vars, ...), none of the head's own,
 * and `--outdir <outdir>/stage-<i>` where the head's is `<outdir>`.
 */
export function stageDeployArgs(extra: readonly string[], i: number, config: string): string[] {
  const args = ['deploy', '--config', config];
  for (let k = 0; k < extra.length; k++) {
    const arg = extra[k];
    if ((OWN_FLAGS as readonly string[]).includes(arg)) continue;
    const eq = arg.indexOf('=');
    const flag = arg.startsWith('--') && eq > 0 ? arg.slice(0, eq) : arg;
    if (!HEAD_ONLY_FLAGS.includes(flag)) {
      args.push(arg);
      continue;
    }
    const values: string[] = eq > 0 && flag !== arg ? [arg.slice(eq + 1)] : [];
    if (flag === arg) while (k + 1 < extra.length && !extra[k + 1].startsWith('-')) values.push(extra[++k]);
    if (flag === '--outdir' && values.length) args.push('--outdir', join(values[0], `stage-${i}`));
  }
  return args;
}

/** Whether `wrangler secret list --format json` output names API_KEYS. */
export function hasApiKeysSecret(listJson: string): boolean {
  return hasSecret(listJson, 'API_KEYS');
}

/** Whether `wrangler secret list --format json` output names the secret `name`. */
export function hasSecret(listJson: string, name: string): boolean {
  try {
    const secrets = JSON.parse(listJson) as unknown;
    return (
      Array.isArray(secrets) &&
      secrets.some((s) => typeof s === 'object' && s !== null && (s as { name?: unknown }).name === name)
    );
  } catch {
    return false;
  }
}

// `npm run deploy`'s bundle, built for real: `wrangler deploy --dry-run` through scripts/deploy.ts (no account,
// no network). Fails when bundling breaks or the upload grows past its budget, and prints the size so every
// CI log says what a deploy would upload.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import {
  deployArgs,
  deployExtra,
  deployStages,
  hasApiKeysSecret,
  hasConfigFlag,
  stageDeployArgs,
} from '../scripts/deploy-args.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Gzip budget of the default upload: ~4.0 MiB, nearly all onnxruntime-web's 14 MB wasm (plus xgrammar's
 * 0.25 MiB for structured outputs), over the free plan's 3 MiB limit and under the paid plan's 10 MiB
 * (docs/deploy.md). `--kernels-only` drops onnxruntime's wasm.
 */
const GZIP_BUDGET_KIB = 4608;
/** The free plan's upload limit (3 MiB gzip). */
const FREE_PLAN_KIB = 3072;
/**
 * A pipeline stage's upload (gzip): its layers' code and the worker's two relaxed kernels builds, ~130 KiB; onnxruntime-web's or
 * xgrammar's WebAssembly in it (a stage uses neither) would pass this at once.
 */
const STAGE_GZIP_KIB = { min: 16, max: 256 };

/**
 * `npm run deploy -- --dry-run <flags> --outdir <out>` (with `env` besides the process's): its log (it must
 * succeed), for `check` to read with `out`.
 */
function dryRun(flags: string[], check: (log: string, out: string) => void, env: NodeJS.ProcessEnv = {}): void {
  const out = mkdtempSync(join(tmpdir(), 'edge-infer-bundle-'));
  try {
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'scripts/deploy.ts', '--dry-run', ...flags, '--outdir', out],
      {
        cwd: ROOT,
        encoding: 'utf8',
        env: { ...process.env, PIPELINE_STAGES: '', ...env, WRANGLER_SEND_METRICS: 'false', NO_COLOR: '1', CI: 'true' },
        timeout: 150_000,
      },
    );
    const log = `${run.stdout}\n${run.stderr}`;
    expect(run.status, log).toBe(0);
    check(log, out);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

describe('npm run deploy', () => {
  it('bundles with wrangler deploy --dry-run, within the size budget', () => {
    dryRun([], (log, out) => {
      const m = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(log);
      expect(m, log).not.toBeNull();
      const [total, gzip] = [Number(m![1]), Number(m![2])];
      // Our own measure of what wrangler reports: every module it wrote, gzipped one by one.
      const files = readdirSync(out).filter((f) => !f.endsWith('.map') && f !== 'README.md');
      const ours = files.reduce((n, f) => n + gzipSync(readFileSync(join(out, f))).length, 0) / 1024;
      console.log(
        `deploy bundle: ${total.toFixed(0)} KiB, gzip ${gzip.toFixed(0)} KiB (wrangler); modules: ${files.join(', ')}; gzip measured here ${ours.toFixed(0)} KiB; budget ${GZIP_BUDGET_KIB} KiB`,
      );
      expect(files).toContain('index.js');
      expect(Math.abs(ours - gzip) / gzip).toBeLessThan(0.1);
      expect(gzip).toBeLessThan(GZIP_BUDGET_KIB);
      // The dry run carried the production vars (wrangler hides values given with --var).
      expect(log).toMatch(/env\.ALLOW_LOOPBACK_CALLBACKS \("\(hidden\)"\)/);
      expect(log).not.toMatch(/env\.API_KEYS/);
      // The assets are the served model's files (scripts/lib/deploy-assets.ts), staged and then removed: wordnet-chat's
      // config and tokenizer and its fp32 weights, 5 files, which wrangler reads with their 2 folders.
      expect(log).toMatch(
        /^edge-infer: assets \.deploy-assets\/: 5 files, [\d,]+ bytes \(wordnet-chat\/config\.json, /m,
      );
      expect(log).toMatch(/Read 7 files from the assets directory .*\.deploy-assets/);
      expect(log).toMatch(/^edge-infer: the worker: bundle [\d,.]+ KiB, gzip [\d,.]+ KiB; 7 assets read/m);
      // The report a dry run ends with (issue 47): both plans, what a real deploy needs, the start check's verdict.
      expect(log).toMatch(
        /^edge-infer: the worker: [\d,]+ KiB gzip: over the Free plan's 3 MB, within the Paid plan's 10 MB; --kernels-only .* fits the Free plan$/m,
      );
      expect(log).toMatch(/^ {2}secret API_KEYS .*npx wrangler secret put API_KEYS/m);
      expect(log).toMatch(/^ {2}secret OWNER_SECRET/m);
      expect(log).toMatch(/^ {2}no R2 bucket: the model goes up with the assets$/m);
      expect(log).toMatch(
        /^edge-infer: the start check passes the model:\n {2}model +wordnet-chat from \.\/models\/wordnet-chat\//m,
      );
      for (const left of ['.deploy-assets', 'wrangler.deploy.toml'])
        expect(existsSync(join(ROOT, left)), `${left} is removed`).toBe(false);
    });
  }, 180_000);

  it('refuses, before bundling, a model the start check refuses (as the deployed Worker would)', () => {
    const run = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        'scripts/deploy.ts',
        '--dry-run',
        '--var',
        'MEMORY_BUDGET_MB:8',
        '--outdir',
        join(tmpdir(), 'never'),
      ],
      { cwd: ROOT, encoding: 'utf8', env: { ...process.env, PIPELINE_STAGES: '', NO_COLOR: '1' }, timeout: 120_000 },
    );
    expect(run.status, run.stderr).toBe(1);
    expect(run.stderr).toMatch(
      /^edge-infer: MODEL=wordnet-chat cannot be served: the model does not fit the memory budget/m,
    );
    expect(`${run.stdout}${run.stderr}`).not.toMatch(/Total Upload/);
  }, 150_000);

  it('--kernels-only leaves onnxruntime-web out: the edge kernels alone fit the free plan', () => {
    dryRun(['--kernels-only'], (log, out) => {
      const gzip = Number(/Total Upload: [\d.]+ KiB \/ gzip: ([\d.]+) KiB/.exec(log)?.[1]);
      const files = readdirSync(out);
      console.log(`deploy bundle --kernels-only: gzip ${gzip.toFixed(0)} KiB; modules: ${files.join(', ')}`);
      for (const build of ['relaxed-wide', 'dot-add'])
        expect(files.some((f) => f.endsWith(`edge-kernels-${build}.wasm`))).toBe(true);
      expect(files.some((f) => f.includes('ort-wasm'))).toBe(false);
      expect(gzip).toBeLessThan(FREE_PLAN_KIB);
      expect(log).toMatch(
        /^edge-infer: the worker: [\d,]+ KiB gzip: within the Free plan's 3 MB and the Paid plan's 10 MB$/m,
      );
      expect(existsSync(join(ROOT, 'wrangler.kernels-only.toml')), 'the temporary config is removed').toBe(false);
    });
  }, 180_000);

  it('PIPELINE_STAGES=2 bundles the two stage scripts first, then the head bound to them', () => {
    dryRun(
      ['--var', 'MODEL:tiny'],
      (log, out) => {
        // Each wrangler deploy's part of the log, in the order they ran.
        const parts = log.split(/^npm run deploy: /m).slice(1);
        expect(
          parts.map((p) => p.split('\n')[0]),
          log,
        ).toEqual([
          'stage 1 of 2 (wrangler.pipeline-stage-1.toml)',
          'stage 2 of 2 (wrangler.pipeline-stage-2.toml)',
          'the head (wrangler.pipeline-head.toml)',
        ]);
        const gzipOf = (part: string) => Number(/Total Upload: [\d.]+ KiB \/ gzip: ([\d.]+) KiB/.exec(part)?.[1]);
        for (const i of [1, 2]) {
          const part = parts[i - 1];
          const files = readdirSync(join(out, `stage-${i}`));
          const gzip = gzipOf(part);
          console.log(`deploy bundle, stage ${i}: gzip ${gzip.toFixed(0)} KiB; modules: ${files.join(', ')}`);
          expect(files).toContain('index.js');
          for (const build of ['relaxed-wide', 'dot-add'])
            expect(files.some((f) => f.endsWith(`edge-kernels-${build}.wasm`))).toBe(true);
          // The stage entry imports the kernels alone (src/objects/stage-runtime.ts).
          expect(files.filter((f) => f.includes('ort-wasm') || f.includes('xgrammar'))).toEqual([]);
          expect(gzip).toBeGreaterThan(STAGE_GZIP_KIB.min);
          expect(gzip).toBeLessThan(STAGE_GZIP_KIB.max);
          // Its own object class, and the model's vars baked into its config (a --var would show as hidden).
          expect(part).toMatch(/env\.STAGE \(StageObject\) +Durable Object/);
          expect(part).toMatch(/env\.MODEL \("tiny"\)/);
          expect(part).not.toMatch(/env\.STAGE_1|env\.INFERENCE/);
        }
        const head = parts[2];
        expect(readdirSync(out)).toContain('index.js');
        expect(gzipOf(head)).toBeLessThan(GZIP_BUDGET_KIB);
        for (const i of [1, 2])
          expect(head).toMatch(new RegExp(`env\\.STAGE_${i} \\(StageObject, defined in edge-infer-stage-${i}\\)`));
        expect(head).toMatch(/env\.INFERENCE \(InferenceObject\)/);
        // The user's --var and the production vars reach the head.
        expect(head).toMatch(/env\.MODEL \("\(hidden\)"\)/);
        expect(head).toMatch(/env\.ALLOW_LOOPBACK_CALLBACKS \("\(hidden\)"\)/);
        for (const file of ['wrangler.pipeline-head.toml', 'wrangler.pipeline-stage-1.toml'])
          expect(existsSync(join(ROOT, file)), `${file} is removed`).toBe(false);
      },
      { PIPELINE_STAGES: '2' },
    );
  }, 180_000);

  it('--kernels-only with PIPELINE_STAGES leaves onnxruntime-web out of the head too', () => {
    dryRun(['--kernels-only', '--var', 'PIPELINE_STAGES:2'], (log, out) => {
      expect(log.match(/^npm run deploy: /gm), log).toHaveLength(3);
      expect(readdirSync(out).some((f) => f.includes('ort-wasm'))).toBe(false);
      expect(readdirSync(join(out, 'stage-2'))).toContain('index.js');
      const head = Number(
        /Total Upload: [\d.]+ KiB \/ gzip: ([\d.]+) KiB/.exec(log.split(/^npm run deploy: the head/m)[1])?.[1],
      );
      expect(head).toBeLessThan(FREE_PLAN_KIB);
    });
  }, 180_000);

  it('gives a stage the flags that apply to any Worker, and the head its own', () => {
    expect(deployExtra({ PIPELINE_STAGES: '3' }, ['--var', 'PIPELINE_STAGES:2'])).toEqual([
      '--var',
      'PIPELINE_STAGES:3',
      '--var',
      'PIPELINE_STAGES:2',
    ]);
    expect(deployStages(deployExtra({ PIPELINE_STAGES: '3' }, ['--var', 'PIPELINE_STAGES:2']))).toBe(2);
    expect(deployStages(deployExtra({ PIPELINE_STAGES: '3' }, []))).toBe(3);
    expect(deployStages(['--dry-run'])).toBe(0);
    expect(() => deployStages(['--var=PIPELINE_STAGES:two'])).toThrow(/PIPELINE_STAGES must be a whole number/);
    const extra = [
      '--allow-open',
      '--var',
      'MODEL:tiny',
      '--dry-run',
      '--name',
      'other',
      '--routes',
      'a.example/*',
      'b.example/*',
      '--outdir=dist',
      '--minify',
      '--var=API_KEYS:k',
      '--tag',
      'v2',
    ];
    expect(stageDeployArgs(extra, 2, 'wrangler.pipeline-stage-2.toml')).toEqual([
      'deploy',
      '--config',
      'wrangler.pipeline-stage-2.toml',
      '--dry-run',
      '--outdir',
      join('dist', 'stage-2'),
      '--minify',
      '--tag',
      'v2',
    ]);
    expect(deployArgs(['--kernels-only', '--dry-run'], 'wrangler.pipeline-head.toml')).toEqual([
      'deploy',
      '--var',
      'ALLOW_LOOPBACK_CALLBACKS:false',
      '--config',
      'wrangler.pipeline-head.toml',
      '--dry-run',
    ]);
    expect(hasConfigFlag(['-c', 'x.toml'])).toBe(true);
    expect(hasConfigFlag(['--config=x.toml'])).toBe(true);
    expect(hasConfigFlag(['--dry-run'])).toBe(false);
  });

  it('passes production vars before the user’s flags and keeps its own flags to itself', () => {
    expect(deployArgs(['--allow-open', '--dry-run'])).toEqual([
      'deploy',
      '--var',
      'ALLOW_LOOPBACK_CALLBACKS:false',
      '--dry-run',
    ]);
    expect(hasApiKeysSecret('[{"name":"API_KEYS","type":"secret_text"}]')).toBe(true);
    expect(hasApiKeysSecret('[{"name":"OTHER","type":"secret_text"}]')).toBe(false);
    expect(hasApiKeysSecret('not json')).toBe(false);
  });
});

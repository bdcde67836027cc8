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
import { deployArgs, hasApiKeysSecret } from '../scripts/deploy-args.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Gzip budget of the default upload: ~4.0 MiB, nearly all onnxruntime-web's 14 MB wasm (plus xgrammar's
 * 0.25 MiB for structured outputs), over the free plan's 3 MiB limit and under the paid plan's 10 MiB
 * (docs/deploy.md). `--kernels-only` drops onnxruntime's wasm.
 */
const GZIP_BUDGET_KIB = 4608;
/** The free plan's upload limit (3 MiB gzip). */
const FREE_PLAN_KIB = 3072;

/** `npm run deploy -- --dry-run <flags> --outdir <out>`: its log (it must succeed), for `check` to read with `out`. */
function dryRun(flags: string[], check: (log: string, out: string) => void): void {
  const out = mkdtempSync(join(tmpdir(), 'edge-infer-bundle-'));
  try {
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'scripts/deploy.ts', '--dry-run', ...flags, '--outdir', out],
      {
        cwd: ROOT,
        encoding: 'utf8',
        env: { ...process.env, WRANGLER_SEND_METRICS: 'false', NO_COLOR: '1', CI: 'true' },
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
    });
  }, 180_000);

  it('--kernels-only leaves onnxruntime-web out: the edge kernels alone fit the free plan', () => {
    dryRun(['--kernels-only'], (log, out) => {
      const gzip = Number(/Total Upload: [\d.]+ KiB \/ gzip: ([\d.]+) KiB/.exec(log)?.[1]);
      const files = readdirSync(out);
      console.log(`deploy bundle --kernels-only: gzip ${gzip.toFixed(0)} KiB; modules: ${files.join(', ')}`);
      expect(files.some((f) => f.endsWith('edge-kernels-relaxed.wasm'))).toBe(true);
      expect(files.some((f) => f.includes('ort-wasm'))).toBe(false);
      expect(gzip).toBeLessThan(FREE_PLAN_KIB);
      expect(existsSync(join(ROOT, 'wrangler.kernels-only.toml')), 'the temporary config is removed').toBe(false);
    });
  }, 180_000);

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

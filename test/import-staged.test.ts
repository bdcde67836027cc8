// Importing a model while `npm start` runs (issue 47, finding 1): wrangler dev watches ./models, its assets; a
// folder written there file by file reloads the server at each file, and a file over the 25 MiB cap seen before
// models/.assetsignore lists its folder stops the server. The real CLI (`model:import`) into a models folder of
// the test's own (EDGE_INFER_MODELS_DIR, so no running server here sees it), watched as wrangler watches it:
// the folder appears once, whole, and a folder too big for the assets is listed in .assetsignore before it appears.
import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  watch,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ASSET_LIMIT_BYTES } from '../scripts/import/assets-ignore.js';
import { presetGgufInput, writeLlamaGguf } from '../scripts/model/gguf-writer.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const run = promisify(execFile);
let dir: string;
let models: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'import-staged-'));
  models = join(dir, 'models');
  mkdirSync(models);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The files under `folder` with their sizes, sorted. */
function listing(folder: string): string[] {
  const out: string[] = [];
  const walk = (d: string, prefix: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true }))
      if (e.isDirectory()) walk(join(d, e.name), `${prefix}${e.name}/`);
      else out.push(`${prefix}${e.name} ${statSync(join(d, e.name)).size}`);
  };
  walk(folder, '');
  return out.sort();
}

/** Runs model:import into models/<name>, watching models/ meanwhile: its events, and the folder as first seen. */
async function importWatched(gguf: string, name: string) {
  const events: string[] = [];
  let firstSight: string[] | undefined;
  let ignoredAtFirstSight: boolean | undefined;
  const watcher = watch(models, (_event, file) => {
    events.push(String(file));
    if (file === name && firstSight === undefined && existsSync(join(models, name))) {
      firstSight = listing(join(models, name));
      const ignore = join(models, '.assetsignore');
      ignoredAtFirstSight = existsSync(ignore) && readFileSync(ignore, 'utf8').split('\n').includes(`${name}/`);
    }
  });
  try {
    const { stdout } = await run('npx', ['tsx', 'scripts/model-import.ts', 'gguf', gguf, '--out', join(models, name)], {
      cwd: ROOT,
      env: { ...process.env, EDGE_INFER_MODELS_DIR: models },
      timeout: 120_000,
    });
    await new Promise((r) => setTimeout(r, 200)); // the last events delivered
    return { stdout, events, firstSight, ignoredAtFirstSight };
  } finally {
    watcher.close();
  }
}

it('a small model: the folder appears whole, at once; nothing is left staged', { timeout: 180_000 }, async () => {
  const gguf = join(dir, 'small.gguf');
  writeLlamaGguf(gguf, presetGgufInput('tiny-qwen2', 1), 'Q8_0');
  const { events, firstSight } = await importWatched(gguf, 'small');
  expect(events.filter((e) => e === 'small').length).toBeGreaterThan(0);
  expect(firstSight).toEqual(listing(join(models, 'small')));
  expect(firstSight).toContain(`model.gguf ${statSync(gguf).size}`);
  expect(existsSync(join(dir, '.import-staging')) ? readdirSync(join(dir, '.import-staging')) : []).toEqual([]);
  // Importing again replaces the folder, again whole.
  const again = await importWatched(gguf, 'small');
  expect(again.firstSight).toEqual(listing(join(models, 'small')));
});

it('a model over the 25 MiB asset cap: listed in .assetsignore before its folder appears; model:upload named', {
  timeout: 180_000,
}, async () => {
  const gguf = join(dir, 'big.gguf');
  writeLlamaGguf(gguf, presetGgufInput('tiny-qwen2', 1), 'F32');
  truncateSync(gguf, ASSET_LIMIT_BYTES + 1024); // zeros past the tensors: a valid file the importer copies whole
  const { stdout, events, ignoredAtFirstSight } = await importWatched(gguf, 'big');
  expect(events.indexOf('.assetsignore')).toBeGreaterThanOrEqual(0);
  expect(events.indexOf('.assetsignore')).toBeLessThan(events.indexOf('big'));
  expect(ignoredAtFirstSight).toBe(true);
  expect(stdout).toContain('npm run model:upload -- models/big');
});

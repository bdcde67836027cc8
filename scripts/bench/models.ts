// The bench's model folders: `tiny` from ./models (what tests and the server use), `bench-135m` (and
// bench-360m, bench-1b) in .bench/models (538 MB in fp32: not under ./models, which is served as static assets
// capped at 25 MiB, and never committed). They are regenerated when the generator's sources change (a stamp
// of them). bench-1b has no fp32 file (past protobuf's 2 GiB: model-make.ts), so ask it for q4 or int8.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { onnxFileFor } from '../../src/engine/model/model-files.js';
import { ensureModels, MODELS_DIR } from '../ensure-models.js';
import { makeModel } from '../model-make.js';
import type { Variant } from './options.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BENCH_MODELS = join(ROOT, '.bench/models');

export function modelDir(model: Variant['model']): string {
  return model === 'tiny' ? join(MODELS_DIR, 'tiny') : join(BENCH_MODELS, model);
}

export function onnxPath(v: Variant): string {
  return join(modelDir(v.model), onnxFileFor(v.dtype));
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => (statSync(join(dir, name)).isDirectory() ? filesUnder(join(dir, name)) : [join(dir, name)]));
}

/** Hash of the generator's sources: a model folder made by an older generator is remade. */
export function generatorStamp(): string {
  // A bundle (scripts/gpu-kit) carries no generator sources: its models are made once per unpacking.
  if (!existsSync(join(ROOT, 'scripts/model-make.ts'))) return 'bundled';
  const hash = createHash('sha256');
  for (const file of [
    join(ROOT, 'scripts/model-make.ts'),
    ...filesUnder(join(ROOT, 'scripts/model')),
    ...filesUnder(join(ROOT, 'scripts/tokenizer')),
  ]) {
    hash.update(relative(ROOT, file)).update(readFileSync(file));
  }
  return hash.digest('hex');
}

/** Makes sure every variant's files exist and were made by the current generator. */
export function ensureBenchModels(variants: readonly Variant[]): void {
  if (variants.some((v) => v.model === 'tiny')) ensureModels();
  for (const model of new Set(variants.map((v) => v.model))) {
    if (model !== 'tiny')
      ensureGenerated(
        model,
        variants.filter((v) => v.model === model),
      );
  }
}

function ensureGenerated(model: Exclude<Variant['model'], 'tiny'>, wanted: readonly Variant[]): void {
  const dir = modelDir(model);
  const stampFile = join(dir, '.stamp');
  const stamp = generatorStamp();
  const fresh = existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp;
  const missing = wanted.filter((v) => !existsSync(onnxPath(v)));
  if (fresh && missing.length === 0) return;
  // A stale folder is remade whole (variants from an older generator would not match the new fp32);
  // otherwise only what is missing is added. fp32 is always (re)written.
  const existing = (['fp16', 'int8', 'q4'] as const).filter((d) => existsSync(onnxPath({ model, dtype: d })));
  const dtypes = new Set(fresh ? missing.map((v) => v.dtype) : [...wanted.map((v) => v.dtype), ...existing]);
  console.error(`bench: generating ${model} (${[...dtypes].join(', ')}) into ${dir} ...`);
  makeModel({
    preset: model,
    outDir: dir,
    dtypes: [...dtypes].filter((d) => d !== 'fp32') as ('fp16' | 'int8' | 'q4')[],
  });
  writeFileSync(stampFile, stamp);
}

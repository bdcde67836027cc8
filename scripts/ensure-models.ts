// Generates the models tests and `npm start` use into ./models, unless they are there and were made by
// the current generator (a stamp holds the hash of the generator's sources, so editing it regenerates).
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { makeModel } from './model-make.js';
import { importSafetensors } from './model-import.js';
import { writeModelFolder } from './import/model-folder.js';
import { writeBrokenAdapter, writeTestAdapters } from './model/lora-adapters.js';
import type { PresetName } from './model/presets.js';
import type { Dtype } from './model/weight-ops.js';
import { answerHelp } from './lib/help.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const MODELS_DIR = join(ROOT, 'models');

/** The models every checkout needs: the default `tiny` in every dtype, `tiny-untied` for lm_head, `tiny-draft` and `tiny-copy` for speculation. */
const WANTED: { preset: PresetName; dtypes: readonly Dtype[] }[] = [
  { preset: 'tiny', dtypes: ['fp32', 'fp16', 'int8', 'q4'] },
  { preset: 'tiny-untied', dtypes: ['fp32'] },
  { preset: 'tiny-draft', dtypes: ['fp32'] },
  { preset: 'tiny-copy', dtypes: ['fp32'] },
];

/** `tiny` again with LoRA adapters under it (scripts/model/lora-adapters.ts): the adapters' tests and e2e serve it. */
const WITH_ADAPTERS = { name: 'tiny-lora', preset: 'tiny', dtypes: ['fp32', 'int8', 'q4'] } as const;

/**
 * Trained models committed in pretrained/ (Hugging Face folders, fp16 safetensors), imported through our
 * own safetensors importer: `wordnet-chat` is what `npm start` serves; its draft serves speculation.
 */
const PRETRAINED: { name: string; dtypes: readonly Dtype[] }[] = [
  { name: 'wordnet-chat', dtypes: ['fp32', 'fp16', 'int8', 'q4'] },
  { name: 'wordnet-chat-draft', dtypes: ['fp32'] },
];
const PRETRAINED_DIR = join(ROOT, 'pretrained');

function filesUnder(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      return statSync(path).isDirectory() ? filesUnder(path) : [path];
    });
}

function generatorStamp(): string {
  const hash = createHash('sha256');
  const sources = [
    join(ROOT, 'scripts/model-make.ts'),
    ...filesUnder(join(ROOT, 'scripts/model')),
    ...filesUnder(join(ROOT, 'scripts/tokenizer')),
    ...filesUnder(join(ROOT, 'scripts/import')),
    join(ROOT, 'src/engine/adapters/safetensors.ts'),
    ...PRETRAINED.flatMap(({ name }) =>
      existsSync(join(PRETRAINED_DIR, name)) ? filesUnder(join(PRETRAINED_DIR, name)) : [],
    ),
  ];
  for (const file of sources) hash.update(relative(ROOT, file)).update(readFileSync(file));
  hash.update(JSON.stringify([WANTED, PRETRAINED, WITH_ADAPTERS]));
  return hash.digest('hex');
}

export function ensureModels(): void {
  const stampFile = join(MODELS_DIR, '.stamp');
  const stamp = generatorStamp();
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) return;
  for (const { preset, dtypes } of WANTED) {
    const outDir = join(MODELS_DIR, preset);
    rmSync(outDir, { recursive: true, force: true });
    makeModel({ preset, outDir, dtypes });
  }
  const loraDir = join(MODELS_DIR, WITH_ADAPTERS.name);
  rmSync(loraDir, { recursive: true, force: true });
  makeModel({ preset: WITH_ADAPTERS.preset, outDir: loraDir, dtypes: WITH_ADAPTERS.dtypes });
  writeTestAdapters(loraDir, WITH_ADAPTERS.name);
  writeBrokenAdapter(loraDir, WITH_ADAPTERS.name);
  for (const { name, dtypes } of PRETRAINED) {
    const from = join(PRETRAINED_DIR, name);
    if (!existsSync(from)) continue; // before its first training run
    const outDir = join(MODELS_DIR, name);
    rmSync(outDir, { recursive: true, force: true });
    writeModelFolder(outDir, importSafetensors(from), dtypes);
  }
  writeFileSync(stampFile, stamp);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(`Usage: npm run models
Generates the models tests and npm start use into ./models (tiny in every dtype, its untied, draft and copy
variants, and the trained wordnet-chat from pretrained/), unless they are there and current. Takes no options.`);
  ensureModels();
}

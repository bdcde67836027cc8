// `npm run model:train`: trains `wordnet-chat` (and its draft) from the corpus, exports both as Hugging Face
// folders into pretrained/, draws the loss curve into docs/, and imports them into ./models through our own
// safetensors importer (scripts/ensure-models.ts). Offline: PyTorch runs only here, never in tests or serving.
//
// Needs Debian's packages: apt-get install wordnet-base python3-torch libopenblas0-pthread python3-matplotlib
// Seeded (--seed, default 22); --steps (default 520) sizes the run: ~55 minutes on a shared 2-core machine.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CORPUS_DIR, makeCorpus } from './model-corpus.js';
import { ensureModels } from './ensure-models.js';
import { WORDNET_DIR } from './wordnet/wordnet-db.js';
import { answerHelp } from './lib/help.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RUN_DIR = join(ROOT, 'artifacts/wordnet-chat/run');
export const PRETRAINED_DIR = join(ROOT, 'pretrained');
const PYTHON = '/usr/bin/python3';
const INSTALL = 'apt-get install wordnet-base python3-torch libopenblas0-pthread python3-matplotlib';

function checkTools(): void {
  const probe = spawnSync(PYTHON, ['-c', 'import torch, numpy, matplotlib'], { encoding: 'utf8' });
  if (probe.status !== 0)
    throw new Error(
      `${PYTHON} cannot import torch, numpy and matplotlib (${probe.stderr.trim()}); install: ${INSTALL}`,
    );
}

/** The copyright notice and licence WordNet asks to appear on all copies (of derived works too). */
function wordnetLicence(): string {
  const copyright = readFileSync('/usr/share/doc/wordnet-base/copyright', 'utf8');
  const start = copyright.indexOf('License: WordNet3.0');
  const end = copyright.indexOf('\nFiles: debian/*');
  const text = copyright
    .slice(start, end)
    .split('\n')
    .slice(1)
    .map((line) => line.replace(/^ \.?/, ''))
    .join('\n');
  return `The weights in this folder were trained on text derived from WordNet 3.0 (Debian's wordnet-base,
${WORDNET_DIR}). WordNet's licence:\n\n${text.trim()}\n`;
}

function run(args: string[]): void {
  const result = spawnSync('nice', ['-n', '5', PYTHON, ...args], {
    stdio: 'inherit',
    env: { ...process.env, OPENBLAS_NUM_THREADS: '1' },
  });
  if (result.status !== 0) throw new Error(`${PYTHON} ${args[0]} failed (${result.status ?? result.signal})`);
}

export function train(argv: readonly string[]): void {
  checkTools();
  if (!existsSync(join(CORPUS_DIR, 'train.bin'))) makeCorpus();
  rmSync(RUN_DIR, { recursive: true, force: true });
  mkdirSync(RUN_DIR, { recursive: true });
  run([join(ROOT, 'scripts/train/train.py'), '--corpus', CORPUS_DIR, '--out', RUN_DIR, ...argv]);
  publish();
}

/** The finished run into the repo: loss curve, pretrained/ folders with WordNet's licence, ./models. */
export function publish(): void {
  run([
    join(ROOT, 'scripts/train/plot_loss.py'),
    join(RUN_DIR, 'log.json'),
    join(ROOT, 'docs/wordnet-chat-loss.png'),
    'wordnet-chat: training and held-out loss',
  ]);
  const summary = JSON.parse(readFileSync(join(RUN_DIR, 'summary.json'), 'utf8'));
  const corpusStats = JSON.parse(readFileSync(join(CORPUS_DIR, 'stats.json'), 'utf8'));
  for (const name of ['wordnet-chat', 'wordnet-chat-draft']) {
    const out = join(PRETRAINED_DIR, name);
    rmSync(out, { recursive: true, force: true });
    cpSync(join(RUN_DIR, name), out, { recursive: true });
    writeFileSync(join(out, 'LICENSE-WORDNET.txt'), wordnetLicence());
  }
  // What the engine must reproduce (test/wordnet-chat.test.ts) and the model card's numbers.
  writeFileSync(
    join(PRETRAINED_DIR, 'wordnet-chat', 'training.json'),
    `${JSON.stringify({ ...summary, corpus: corpusStats }, null, 1)}\n`,
  );
  ensureModels();
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(`Usage: npm run model:train -- [--seed N] [--steps N]
       npm run model:train -- --publish
Trains wordnet-chat and its draft from the corpus (npm run model:corpus), exports them into pretrained/,
draws the loss curve into docs/ and imports them into ./models. --seed (default 22); --steps (default 520,
~55 minutes on 2 cores). --publish: only the steps after training. Needs: ${INSTALL}`);
  try {
    const argv = process.argv.slice(2);
    // --publish: only the steps after training, for a run that was started by hand.
    if (argv.includes('--publish')) publish();
    else train(argv);
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}

// The architectures the kernels run beside Llama (issue 30, "Shapes for the bench"): batch-1 greedy decode
// tokens/s of the kernels against llama.cpp's WebAssembly build (@wllama/wllama, one thread) on the same GGUF
// file, for Qwen2.5-0.5B's, Qwen3-0.6B's and Gemma-3-270M's shapes (random weights, Q4_0 and Q8_0, written by
// scripts/model/gguf-writer.ts and imported with model:import gguf). Each run times both engines on each file,
// in turn, so a noisy moment on this shared machine hits both; the ratio is taken per run, then the median.
//
//   tsx scripts/bench/architectures.ts [--runs N] [--tokens N] [--presets a,b] [--types Q4_0,Q8_0] [--json FILE]
//   (npm run bench: section architectures)
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Engine } from '../../src/engine/engine.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { importGguf } from '../import/gguf.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { DEFAULT_SEED } from '../model-make.js';
import { presetGgufInput, writeLlamaGguf, type GgufType } from '../model/gguf-writer.js';
import { PRESETS, type PresetName } from '../model/presets.js';

export type { ArchitectureBenchRow } from './architectures-table.js';
import { generatorStamp } from './models.js';
import { architecturesTable, type ArchitectureBenchRow } from './architectures-table.js';
import { ratioByRun, sampled } from './stats.js';
import { loadWllama, nonUtf8TokenIds } from './wllama-node.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const ARCHITECTURE_PRESETS: readonly PresetName[] = [
  'bench-qwen2-0.5b',
  'bench-qwen3-0.6b',
  'bench-gemma3-270m',
];
const PROMPT = 'The quick brown fox jumps over the lazy dog, and then it runs back into the woods.';

const folderOf = (preset: PresetName, type: GgufType): string => join(ROOT, '.bench/models', `${preset}-${type}`);

/** Writes and imports the preset's GGUF file unless the folder is there from the current generator. */
export async function ensureFolder(preset: PresetName, type: GgufType, log: (s: string) => void): Promise<string> {
  const folder = folderOf(preset, type);
  const stampFile = join(folder, '.stamp');
  const stamp = generatorStamp();
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) return folder;
  rmSync(folder, { recursive: true, force: true });
  mkdirSync(join(ROOT, '.bench/models'), { recursive: true });
  const file = `${folder}.gguf`;
  log(`architectures: generating ${preset} and writing ${type} GGUF ...`);
  writeLlamaGguf(file, presetGgufInput(preset, DEFAULT_SEED), type);
  await importGguf(file, folder);
  rmSync(file);
  writeFileSync(stampFile, stamp);
  return folder;
}

/** Decode tokens/s of one greedy request on the kernels: generated tokens after the first, over their time. */
async function kernelsDecode(engine: Engine, tokens: number): Promise<number> {
  let first = 0;
  let count = 0;
  const request = { prompt: PROMPT, max_tokens: tokens, temperature: 0, ignore_eos: true };
  for await (const event of engine.generate(request)) {
    if (event.type !== 'token') break;
    if (count++ === 0) first = performance.now();
  }
  if (count !== tokens) throw new Error(`kernels: ${count} tokens, wanted ${tokens}`);
  return ((count - 1) * 1000) / (performance.now() - first);
}

export async function benchArchitectures(
  presets: readonly PresetName[],
  types: readonly GgufType[],
  runs: number,
  tokens: number,
  log: (s: string) => void,
): Promise<ArchitectureBenchRow[]> {
  const rows: ArchitectureBenchRow[] = [];
  for (const preset of presets)
    for (const type of types) {
      const folder = await ensureFolder(preset, type, log);
      const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(folder), {
        kvCacheBytes: 64 << 20,
      });
      const wllama = await loadWllama(join(folder, 'model.gguf'));
      const bannedIds = nonUtf8TokenIds(engine.tokenizer);
      const ours: number[] = [];
      const theirs: number[] = [];
      try {
        for (let run = 0; run <= runs; run++) {
          // Run 0 warms both up; the order alternates from run to run.
          const pair = [
            async () => ours.push(await kernelsDecode(engine, tokens)),
            async () => theirs.push((await wllama.greedy(PROMPT, tokens, { bannedIds })).decodeTokPerS),
          ];
          for (const step of run % 2 ? pair.reverse() : pair) await step();
          if (run === 0) {
            ours.pop();
            theirs.pop();
          } else
            log(
              `${preset} ${type} run ${run}/${runs}: kernels ${ours.at(-1)!.toFixed(1)}, llama.cpp ${theirs.at(-1)!.toFixed(1)} tok/s`,
            );
        }
        rows.push({
          preset,
          architecture: PRESETS[preset].architecture ?? 'llama',
          headDim: PRESETS[preset].headDim,
          type,
          fileBytes: statSync(join(folder, 'model.gguf')).size,
          kernelsMemoryBytes: engine.stats().wasmMemoryBytes ?? 0,
          decodeTokens: tokens,
          kernels: sampled(ours),
          llamaCpp: sampled(theirs),
          ratio: ratioByRun(ours, theirs),
        });
      } finally {
        await wllama.exit();
        await engine.runner.release();
      }
    }
  return rows;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '3' },
      tokens: { type: 'string', default: '64' },
      presets: { type: 'string', default: ARCHITECTURE_PRESETS.join(',') },
      types: { type: 'string', default: 'Q4_0,Q8_0' },
      json: { type: 'string' },
    },
  });
  const presets = values.presets!.split(',') as PresetName[];
  for (const p of presets) if (!ARCHITECTURE_PRESETS.includes(p)) throw new Error(`unknown preset "${p}"`);
  const types = values.types!.split(',') as GgufType[];
  const rows = await benchArchitectures(presets, types, Number(values.runs), Number(values.tokens), (s) =>
    console.error(s),
  );
  if (values.json) writeFileSync(values.json, `${JSON.stringify(rows, null, 1)}\n`);
  console.log(architecturesTable(rows));
  process.exit(0);
}

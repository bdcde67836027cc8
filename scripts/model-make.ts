// Deterministic test-model generator: writes a Hugging Face style Llama folder (docs/models.md "Model folder layout").
//
//   npx tsx scripts/model-make.ts --preset <tiny|tiny-untied|bench-135m> --out <dir> [--seed N]
//                                 [--dtype fp32|fp16|int8|q4|all]
//
// onnx/model.onnx (fp32) is always written, whatever --dtype says: the reference forward pass and
// the quantised-vs-fp32 checks read it. --dtype adds that variant; `all` writes every variant.
// Same preset + seed + dtype => byte-identical files (no timestamps, fixed key order, seeded PRNG).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildLlamaModel } from './model/llama-graph.js';
import { encodeModel, writeEncoded } from './model/onnx-proto-writer.js';
import { makeCopyWeights } from './model/copy-weights.js';
import {
  COPY_PERIOD,
  PRESETS,
  PRESET_NAMES,
  generationConfigJson,
  isPresetName,
  llamaConfigJson,
  type PresetName,
} from './model/presets.js';
import { DTYPES, ONNX_FILE, type Dtype } from './model/weight-ops.js';
import { makeWeights } from './model/weights.js';
import { buildTokenizerFiles } from './tokenizer/build-tokenizer.js';

export const DEFAULT_SEED = 42;

export interface MakeModelOptions {
  preset: PresetName;
  outDir: string;
  seed?: number;
  /** Variants to write besides fp32 (fp32 is always written). Default ['fp32']. */
  dtypes?: readonly Dtype[];
}

export function writeJson(path: string, value: unknown): void {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);
}

export function makeModel({ preset, outDir, seed = DEFAULT_SEED, dtypes = ['fp32'] }: MakeModelOptions): void {
  const p = PRESETS[preset];
  if (!p) throw new Error(`unknown preset ${preset}`);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`seed must be a uint32, got ${seed}`);
  mkdirSync(join(outDir, 'onnx'), { recursive: true });
  writeJson(join(outDir, 'config.json'), llamaConfigJson(p));
  writeJson(join(outDir, 'generation_config.json'), generationConfigJson(p));
  const tok = buildTokenizerFiles({ vocabSize: p.vocabSize, modelMaxLength: p.maxPositionEmbeddings });
  writeJson(join(outDir, 'tokenizer.json'), tok.tokenizerJson);
  writeJson(join(outDir, 'tokenizer_config.json'), tok.tokenizerConfig);

  const period = COPY_PERIOD[preset];
  const weights = period === undefined ? makeWeights(p, seed) : makeCopyWeights(p, seed, period);
  const wanted = new Set<Dtype>(['fp32', ...dtypes]);
  for (const dtype of DTYPES.filter((d) => wanted.has(d))) {
    // One variant at a time so peak memory is the fp32 weights plus one encoded variant.
    writeEncoded(join(outDir, 'onnx', ONNX_FILE[dtype]), encodeModel(buildLlamaModel(p, weights, dtype)));
  }
}

function parseArgs(argv: readonly string[]): MakeModelOptions {
  const args = new Map<string, string>();
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    const value = argv[i + 1];
    if (!key.startsWith('--') || value === undefined) throw new Error(`bad argument near "${key}"`);
    args.set(key.slice(2), value);
  }
  const usage = `usage: model-make --preset <${PRESET_NAMES.join('|')}> --out <dir> [--seed N] [--dtype ${DTYPES.join('|')}|all]`;
  const preset = args.get('preset');
  const outDir = args.get('out');
  if (!preset || !isPresetName(preset) || !outDir) throw new Error(usage);
  const dtypeArg = args.get('dtype') ?? 'fp32';
  if (dtypeArg !== 'all' && !(DTYPES as readonly string[]).includes(dtypeArg)) throw new Error(usage);
  const seed = args.has('seed') ? Number(args.get('seed')) : DEFAULT_SEED;
  for (const k of args.keys())
    if (!['preset', 'out', 'seed', 'dtype'].includes(k)) throw new Error(`unknown option --${k}\n${usage}`);
  return { preset, outDir, seed, dtypes: dtypeArg === 'all' ? DTYPES : [dtypeArg as Dtype] };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  try {
    const opts = parseArgs(process.argv.slice(2));
    const t0 = performance.now();
    makeModel(opts);
    console.log(
      `wrote ${opts.preset} (seed ${opts.seed}, ${opts.dtypes?.join(',')}) to ${opts.outDir} in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}

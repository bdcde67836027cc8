// Deterministic test-model generator: writes a Hugging Face style Llama folder (docs/models.md "Model folder layout").
//
//   npx tsx scripts/model-make.ts --preset <tiny|tiny-untied|bench-135m> --out <dir> [--seed N]
//                                 [--dtype fp32|fp16|int8|q4|all]
//   npx tsx scripts/model-make.ts --preset ... --out <dir> --export-style hub
//                                 [--dtype fp32|fp16|q4|q4f16|int8|uint8|quantized|all]
//                                 [--bits 4|8] [--block-size 16|32|64|128] [--zero-points] [--accuracy-level N]
//                                 [--per-channel] [--fp32-io] [--rope folded|constant|computed]
//
// onnx/model.onnx (fp32) is always written, whatever --dtype says: the reference forward pass and
// the quantised-vs-fp32 checks read it. --dtype adds that variant; `all` writes every variant. A variant
// past protobuf's 2 GiB is not written (bench-1b's fp32 and fp16): `--preset bench-1b --dtype q4` writes q4 only.
// --export-style hub writes the same weights as graphs shaped like the hub's onnx/ exports (optimum's
// torch export, transformers.js' quantisers; docs/models.md, "The hub's ONNX exports"), under the hub's
// file names; the reference cannot read those (their weights are not under our names).
// Same preset + seed + dtype => byte-identical files (no timestamps, fixed key order, seeded PRNG).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { HUB_DTYPES, HUB_ONNX_FILE, hubFlavour, type HubDtype, type HubFlavour } from './model/export/hub-flavour.js';
import { buildHubLlamaModel } from './model/export/hub-llama-graph.js';
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
  type LlamaShape,
  type PresetName,
} from './model/presets.js';
import { DTYPES, ONNX_FILE, type Dtype } from './model/weight-ops.js';
import { makeWeights, weightSpecs } from './model/weights.js';
import { buildTokenizerFiles } from './tokenizer/build-tokenizer.js';
import { answerHelp } from './lib/help.js';

export const DEFAULT_SEED = 42;

export interface MakeModelOptions {
  preset: PresetName;
  outDir: string;
  seed?: number;
  /** Variants to write besides fp32 (fp32 is always written). Default ['fp32']. */
  dtypes?: readonly Dtype[];
  /** Write hub-shaped graphs of these dtypes (and model.onnx) instead of ours; `dtypes` is then unused. */
  hub?: { dtypes: readonly HubDtype[]; flavour?: Partial<Omit<HubFlavour, 'dtype'>> };
}

export function writeJson(path: string, value: unknown): void {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);
}

export function makeModel({ preset, outDir, seed = DEFAULT_SEED, dtypes = ['fp32'], hub }: MakeModelOptions): void {
  const p = PRESETS[preset];
  if (!p) throw new Error(`unknown preset ${preset}`);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`seed must be a uint32, got ${seed}`);
  if ((p.architecture ?? 'llama') !== 'llama')
    throw new Error(
      `${preset} is a ${p.architecture} model, which our ONNX graphs do not compute: write it as GGUF (npx tsx scripts/model/gguf-writer.ts --preset ${preset} --out <file>) and import that`,
    );
  // Refused before anything is written: a variant past protobuf's limit, asked for alone.
  const variants = hub ? [] : variantsToWrite(p, dtypes);
  mkdirSync(join(outDir, 'onnx'), { recursive: true });
  writeJson(join(outDir, 'config.json'), llamaConfigJson(p));
  writeJson(join(outDir, 'generation_config.json'), generationConfigJson(p));
  const tok = buildTokenizerFiles({ vocabSize: p.vocabSize, modelMaxLength: p.maxPositionEmbeddings });
  writeJson(join(outDir, 'tokenizer.json'), tok.tokenizerJson);
  writeJson(join(outDir, 'tokenizer_config.json'), tok.tokenizerConfig);

  const period = COPY_PERIOD[preset];
  const weights = period === undefined ? makeWeights(p, seed) : makeCopyWeights(p, seed, period);
  if (hub) {
    const wantedHub = new Set<HubDtype>(['fp32', ...hub.dtypes]);
    for (const dtype of HUB_DTYPES.filter((d) => wantedHub.has(d))) {
      const graph = buildHubLlamaModel(p, weights, hubFlavour(dtype, hub.flavour));
      writeEncoded(join(outDir, 'onnx', HUB_ONNX_FILE[dtype]), encodeModel(graph));
    }
    return;
  }
  for (const dtype of variants) {
    // One variant at a time so peak memory is the fp32 weights plus one encoded variant.
    writeEncoded(join(outDir, 'onnx', ONNX_FILE[dtype]), encodeModel(buildLlamaModel(p, weights, dtype)));
  }
}

/** protobuf's limit on a message: our graphs hold their weights inside the file (no external data), so past it no runtime reads one. */
const PROTOBUF_LIMIT = 2 ** 31 - 1;

/** Bytes a parameter takes in each variant, at most (q4's embedding is 8-bit; blocks of 32 with an fp32 scale). */
const BYTES_PER_PARAMETER: Record<Dtype, number> = { fp32: 4, fp16: 2, int8: 1.125, q4: 1.125 };

/**
 * The variants `makeModel` writes: fp32 and `dtypes`, less those past protobuf's limit (bench-1b's fp32 and
 * fp16). fp32 is then left out, as asked-for variants that do not fit are with `all`; asking for no variant
 * that fits is an error.
 */
export function variantsToWrite(p: LlamaShape, dtypes: readonly Dtype[]): Dtype[] {
  const params = weightSpecs(p).reduce((n, s) => n + s.dims.reduce((a, b) => a * b, 1), 0);
  const fits = (d: Dtype) => params * BYTES_PER_PARAMETER[d] < PROTOBUF_LIMIT;
  const wanted = DTYPES.filter((d) => d === 'fp32' || dtypes.includes(d));
  const out = wanted.filter(fits);
  if (out.length === 0 || (dtypes.length === 1 && !fits(dtypes[0])))
    throw new Error(
      `${(params / 1e9).toFixed(2)}G parameters in ${dtypes.join(', ')} pass protobuf's 2 GiB: ask for --dtype int8 or q4`,
    );
  return out;
}

/** Options that take no value. */
const FLAGS = ['zero-points', 'per-channel', 'fp32-io'];

/** The presets our ONNX graphs compute (Llama blocks); the others are written as GGUF (scripts/model/gguf-writer.ts). */
const ONNX_PRESETS = PRESET_NAMES.filter((p) => (PRESETS[p].architecture ?? 'llama') === 'llama');

export const MAKE_USAGE = `Usage: npm run model:make -- --preset <${ONNX_PRESETS.join('|')}> --out <dir> [--seed N] [--dtype ${DTYPES.join('|')}|all]
       npm run model:make -- --preset ... --out <dir> --export-style hub [--dtype ${HUB_DTYPES.join('|')}|all] [--bits 4|8]
                  [--block-size 16|32|64|128] [--zero-points] [--accuracy-level N] [--per-channel] [--fp32-io]
                  [--rope folded|constant|computed]
Writes a random-weight model folder (config.json, tokenizer, ONNX graphs). Qwen2, Qwen3 and Gemma 3 presets
(${PRESET_NAMES.filter((p) => !ONNX_PRESETS.includes(p)).join(', ')}) are written as GGUF:
  npx tsx scripts/model/gguf-writer.ts --preset <name> --out <file.gguf>, then npm run model:import -- gguf <file.gguf>`;

export function parseMakeArgs(argv: readonly string[]): MakeModelOptions {
  const args = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i];
    if (!key.startsWith('--')) throw new Error(`bad argument near "${key}"`);
    if (FLAGS.includes(key.slice(2))) {
      args.set(key.slice(2), 'yes');
      continue;
    }
    const value = argv[++i];
    if (value === undefined) throw new Error(`${key} needs a value`);
    args.set(key.slice(2), value);
  }
  const usage = MAKE_USAGE;
  const preset = args.get('preset');
  const outDir = args.get('out');
  if (!preset || !isPresetName(preset) || !outDir) throw new Error(usage);
  const seed = args.has('seed') ? Number(args.get('seed')) : DEFAULT_SEED;
  const style = args.get('export-style') ?? 'ours';
  if (style !== 'ours' && style !== 'hub') throw new Error(`--export-style is ours or hub\n${usage}`);
  const common = ['preset', 'out', 'seed', 'dtype', 'export-style'];
  const hubOnly = ['bits', 'block-size', 'zero-points', 'accuracy-level', 'per-channel', 'fp32-io', 'rope'];
  for (const k of args.keys())
    if (!common.includes(k) && !(style === 'hub' && hubOnly.includes(k)))
      throw new Error(
        `unknown option --${k}${hubOnly.includes(k) ? ' (it belongs to --export-style hub)' : ''}\n${usage}`,
      );
  const dtypeArg = args.get('dtype') ?? 'fp32';
  if (style === 'ours') {
    if (dtypeArg !== 'all' && !(DTYPES as readonly string[]).includes(dtypeArg)) throw new Error(usage);
    return { preset, outDir, seed, dtypes: dtypeArg === 'all' ? DTYPES : [dtypeArg as Dtype] };
  }
  if (dtypeArg !== 'all' && !(HUB_DTYPES as readonly string[]).includes(dtypeArg)) throw new Error(usage);
  const rope = args.get('rope') ?? 'folded';
  if (rope !== 'folded' && rope !== 'constant' && rope !== 'computed') throw new Error(`--rope: ${rope}?\n${usage}`);
  const number = (k: string, fallback: number) => (args.has(k) ? Number(args.get(k)) : fallback);
  const flavour = {
    bits: number('bits', 4) as 4 | 8,
    blockSize: number('block-size', 32),
    symmetric: !args.has('zero-points'),
    accuracyLevel: args.has('accuracy-level') ? number('accuracy-level', 0) : undefined,
    perChannel: args.has('per-channel'),
    halfIo: !args.has('fp32-io'),
    rope: rope as HubFlavour['rope'],
  };
  hubFlavour('q4', flavour); // refuses a bad bit width or block size now, not after the fp32 graph is written
  return { preset, outDir, seed, hub: { dtypes: dtypeArg === 'all' ? HUB_DTYPES : [dtypeArg as HubDtype], flavour } };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(MAKE_USAGE);
  try {
    const opts = parseMakeArgs(process.argv.slice(2));
    const t0 = performance.now();
    makeModel(opts);
    console.log(
      `wrote ${opts.preset} (seed ${opts.seed}, ${opts.hub ? `hub-shaped ${opts.hub.dtypes.join(',')}` : variantsToWrite(PRESETS[opts.preset], opts.dtypes ?? ['fp32']).join(',')}) to ${opts.outDir} in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}

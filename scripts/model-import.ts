// Imports a real model into our model folder layout.
//
//   npm run model:import -- llama2c <model.bin> <tokenizer.bin> --out <dir> [--dtype fp32|fp16|int8|q4|all|a,b]
//   npm run model:import -- safetensors <hf-folder> --out <dir> [--dtype ...]
//   npm run model:import -- gguf <file.gguf> --out <dir>
//
// llama2c: a llama2.c (run.c, version 0) checkpoint and its tokenizer.bin. safetensors: a Hugging Face
// Llama-family folder (config.json, model.safetensors or shards + model.safetensors.index.json,
// tokenizer.json, tokenizer_config.json, generation_config.json if any). --dtype defaults to fp32.
// Qwen2, Qwen3 and text-only Gemma 3 checkpoints become a GGUF file the kernels run, of the one --dtype
// asked for (import/safetensors-gguf.ts); Llama and Mistral ones our ONNX graph, in each dtype asked for.
// gguf: a llama.cpp GGUF file (llama, qwen2, qwen3, gemma3); its weights are copied in unchanged as model.gguf
// (scripts/import/gguf.ts), so it takes no --dtype.
import { readFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { leftOutMessage } from './import/assets-ignore.js';
import { writeModelStaged } from './import/staged-folder.js';
import { readLlama2cCheckpoint } from './import/llama2c-checkpoint.js';
import { llama2cTokenizerFiles, readLlama2cTokenizer } from './import/llama2c-tokenizer.js';
import { shapeFromHfConfig, weightsFromHf } from './import/hf-llama.js';
import { parseDtypes, writeModelFolder, type ImportedModel } from './import/model-folder.js';
import { SafetensorsCheckpoint } from './import/safetensors.js';
import { importGguf } from './import/gguf.js';
import { isGgufModelType } from './import/hf-architectures.js';
import { importSafetensorsAsGguf, readHfFolderJson } from './import/safetensors-gguf.js';
import { llamaConfigJson } from './model/presets.js';
import { answerHelp } from './lib/help.js';
import type { Dtype } from './model/weight-ops.js';

const USAGE = `Usage: npm run model:import -- <llama2c|safetensors|gguf> ... --out <dir>
  model:import -- llama2c <model.bin> <tokenizer.bin> --out <dir> [--dtype fp32|fp16|int8|q4|all]
  model:import -- safetensors <hf-folder> --out <dir> [--dtype fp32|fp16|int8|q4|all]
  model:import -- gguf <file.gguf> --out <dir>`;

const bytesOf = (path: string): Uint8Array => {
  const b = readFileSync(path);
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
};

export function importLlama2c(modelPath: string, tokenizerPath: string): ImportedModel {
  const { header, shape, weights } = readLlama2cCheckpoint(bytesOf(modelPath));
  const vocab = readLlama2cTokenizer(bytesOf(tokenizerPath), header.vocabSize);
  const { tokenizerJson, tokenizerConfig } = llama2cTokenizerFiles(vocab);
  tokenizerConfig.model_max_length = header.seqLen;
  return {
    shape,
    weights,
    config: { ...llamaConfigJson(shape), bos_token_id: 1, eos_token_id: 2 },
    // run.c stops when the model emits BOS (1), which delimits stories in its training data; 2 is EOS.
    generationConfig: { bos_token_id: 1, eos_token_id: [1, 2], max_length: header.seqLen },
    tokenizerJson,
    tokenizerConfig,
  };
}

/** A Llama or Mistral checkpoint as our graph's weights (the others are written as GGUF: importSafetensorsAsGguf). */
export function importSafetensors(dir: string): ImportedModel {
  const { config, ...files } = readHfFolderJson(dir);
  const shape = shapeFromHfConfig(config);
  const weights = weightsFromHf(SafetensorsCheckpoint.open(dir), shape);
  return { shape, weights, config: { ...config, torch_dtype: 'float32' }, ...files };
}

type Parsed =
  | { kind: 'llama2c' | 'safetensors'; paths: string[]; out: string; dtypes: Dtype[] }
  | { kind: 'gguf'; paths: [string]; out: string };

export function parseImportArgs(argv: readonly string[]): Parsed {
  const [kind, ...rest] = argv;
  const paths: string[] = [];
  const opts = new Map<string, string>();
  for (let i = 0; i < rest.length; i++) {
    if (rest[i].startsWith('--')) {
      const value = rest[i + 1];
      if (value === undefined) throw new Error(`${rest[i]} needs a value\n${USAGE}`);
      if (!['--out', '--dtype'].includes(rest[i])) throw new Error(`unknown option ${rest[i]}\n${USAGE}`);
      opts.set(rest[i].slice(2), value);
      i++;
    } else paths.push(rest[i]);
  }
  const out = opts.get('out');
  if (!out) throw new Error(`--out is required\n${USAGE}`);
  if (kind === 'llama2c' && paths.length === 2) return { kind, paths, out, dtypes: parseDtypes(opts.get('dtype')) };
  if (kind === 'safetensors' && paths.length === 1) return { kind, paths, out, dtypes: parseDtypes(opts.get('dtype')) };
  if (kind === 'gguf' && paths.length === 1) {
    if (opts.has('dtype'))
      throw new Error("--dtype: a GGUF import keeps the file's own types (the .gguf is served as it is)");
    return { kind, paths: [paths[0]], out };
  }
  throw new Error(USAGE);
}

/** The synchronous imports (llama2c, safetensors); a GGUF header is read as a stream: see runImportAsync. */
export function runImport(args: Parsed): { file: string; bytes: number }[] {
  if (args.kind === 'gguf') throw new Error('a GGUF import is asynchronous: call runImportAsync');
  const model =
    args.kind === 'llama2c' ? importLlama2c(args.paths[0], args.paths[1]) : importSafetensors(args.paths[0]);
  return writeModelFolder(args.out, model, args.dtypes);
}

/** Any import, the GGUF one and the safetensors ones written as GGUF included. */
export async function runImportAsync(args: Parsed): Promise<{ file: string; bytes: number }[]> {
  if (args.kind === 'gguf') return importGguf(args.paths[0], args.out);
  if (args.kind === 'safetensors') {
    const json = readHfFolderJson(args.paths[0]);
    if (isGgufModelType(json.config.model_type))
      return importSafetensorsAsGguf(args.paths[0], json, args.out, args.dtypes);
  }
  return runImport(args);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(USAGE);
  try {
    const args = parseImportArgs(process.argv.slice(2));
    const t0 = performance.now();
    // EDGE_INFER_MODELS_DIR: another served folder than ./models (a test's own, so no running server sees it).
    const models = process.env.EDGE_INFER_MODELS_DIR || fileURLToPath(new URL('../models', import.meta.url));
    // Into ./models whole, never file by file under a running npm start (import/staged-folder.ts).
    const { result: files, large } = await writeModelStaged(args.out, models, (out) =>
      runImportAsync({ ...args, out }),
    );
    for (const f of files) console.log(`${(f.bytes / 2 ** 20).toFixed(1).padStart(8)} MiB  ${f.file}`);
    console.log(
      `imported ${args.paths.join(' + ')} into ${args.out} in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
    if (large) console.log(leftOutMessage(basename(resolve(args.out))));
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}

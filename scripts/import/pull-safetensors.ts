// model:pull of a safetensors repo (a transformers checkpoint: config.json, model.safetensors or shards and
// model.safetensors.index.json, tokenizer files). The files go to <out>/.download, each verified as every
// pulled file is; config.json is checked before the weights come, so an architecture the importer cannot
// convert is refused at once; then model:import's safetensors importer writes our graph in the dtypes asked
// for (default q4, the kernels' format) into <out>, or for Qwen2, Qwen3 and Gemma 3 a GGUF file of the one
// dtype asked for, and .download is removed. An interrupted pull resumes from what .download holds.
import { readFileSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { kvBytesPerToken, parseModelConfig } from '../../src/engine/model/config.js';
import { importSafetensors } from '../model-import.js';
import { isGgufModelType } from './hf-architectures.js';
import { shapeFromHfConfig } from './hf-llama.js';
import { HubError } from './hub-client.js';
import { parseDtypes, writeModelFolder } from './model-folder.js';
import { OPTIONAL, REQUIRED } from './pull-onnx.js';
import type { PullResult, RepoPull } from './pull-types.js';
import { checkGgufImport, importSafetensorsAsGguf, readHfFolderJson } from './safetensors-gguf.js';

/** Where the checkpoint waits, inside the output folder, until it is converted. */
export const DOWNLOAD_DIR = '.download';
const INDEX = 'model.safetensors.index.json';
export const DEFAULT_PULL_DTYPES = ['q4'];

export async function pullSafetensors({ opts, revision, byName, result, fetch }: RepoPull): Promise<PullResult> {
  const where = `${opts.repo}@${revision}`;
  if (opts.files?.length)
    throw new HubError(`--file picks ONNX graphs; ${where} is pulled as safetensors and converted: use --dtype`);
  const dtypes = parseDtypes((opts.dtypes ?? DEFAULT_PULL_DTYPES).join(','));
  for (const f of REQUIRED)
    if (!byName.has(f))
      throw new HubError(
        `${where} has no ${f}${f === 'tokenizer.json' && byName.has('tokenizer.model') ? ' (only a SentencePiece tokenizer.model, which is not converted)' : ''}`,
      );
  const staging = join(opts.outDir, DOWNLOAD_DIR);
  for (const f of [...REQUIRED, ...OPTIONAL.filter((f) => byName.has(f))]) await fetch(f, staging);
  const rawConfig = JSON.parse(readFileSync(join(staging, 'config.json'), 'utf8')) as Record<string, unknown>;
  const gguf = isGgufModelType(rawConfig.model_type);
  try {
    if (gguf) checkGgufImport(rawConfig, dtypes);
    else shapeFromHfConfig(rawConfig);
  } catch (e) {
    throw new HubError(`${where}: ${e instanceof Error ? e.message : String(e)}`);
  }
  result.kvBytesPerToken = kvBytesPerToken(parseModelConfig(rawConfig));

  for (const shard of await weightFiles(where, byName, fetch, staging)) await fetch(shard, staging);
  opts.onStage?.(`converting to ${dtypes.join(', ')}`);
  result.written = gguf
    ? await importSafetensorsAsGguf(staging, readHfFolderJson(staging), opts.outDir, dtypes, basename(opts.repo))
    : writeModelFolder(opts.outDir, importSafetensors(staging), dtypes);
  rmSync(staging, { recursive: true, force: true });
  result.dtypes = dtypes;
  const weights = result.written.filter((f) => f.file.endsWith('.onnx') || f.file.endsWith('.gguf'));
  result.weightBytes = Math.max(...weights.map((f) => f.bytes));
  return result;
}

/** model.safetensors, or the shards the index names (the index fetched first). */
async function weightFiles(
  where: string,
  byName: ReadonlyMap<string, unknown>,
  fetch: RepoPull['fetch'],
  staging: string,
): Promise<string[]> {
  if (!byName.has(INDEX)) return ['model.safetensors'];
  await fetch(INDEX, staging);
  const index = JSON.parse(readFileSync(join(staging, INDEX), 'utf8')) as { weight_map?: Record<string, string> };
  if (!index.weight_map || typeof index.weight_map !== 'object')
    throw new HubError(`${where}: ${INDEX} has no weight_map`);
  const shards = [...new Set(Object.values(index.weight_map))].sort();
  const missing = shards.filter((s) => !byName.has(s));
  if (missing.length)
    throw new HubError(`${where}: ${INDEX} names ${missing.join(', ')}, which the repo does not hold`);
  return shards;
}

// Writes an imported model as our model folder (Hugging Face layout, see docs/models.md, "Model folder layout"):
// config files, tokenizer files, and one ONNX graph per requested dtype, built from the given weights
// by the same graph builder that makes the test models.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildLlamaModel } from '../model/llama-graph.js';
import { encodeModel, writeEncoded } from '../model/onnx-proto-writer.js';
import type { LlamaShape } from '../model/presets.js';
import { DTYPES, ONNX_FILE, type Dtype } from '../model/weight-ops.js';
import type { WeightMap } from '../model/weights.js';

export interface ImportedModel {
  shape: LlamaShape;
  weights: WeightMap;
  config: Record<string, unknown>;
  generationConfig: Record<string, unknown>;
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
}

export function parseDtypes(arg: string | undefined): Dtype[] {
  if (arg === undefined) return ['fp32'];
  if (arg === 'all') return [...DTYPES];
  const list = arg.split(',');
  for (const d of list)
    if (!(DTYPES as readonly string[]).includes(d))
      throw new Error(`--dtype: ${d} is not one of ${DTYPES.join(', ')}, all`);
  return list as Dtype[];
}

const json = (path: string, value: unknown) => writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);

/** Writes the folder; returns the files written (relative to outDir) with their sizes. */
export function writeModelFolder(
  outDir: string,
  model: ImportedModel,
  dtypes: readonly Dtype[],
): { file: string; bytes: number }[] {
  mkdirSync(join(outDir, 'onnx'), { recursive: true });
  const written: { file: string; bytes: number }[] = [];
  const put = (file: string, value: unknown) => {
    json(join(outDir, file), value);
    written.push({ file, bytes: Buffer.byteLength(JSON.stringify(value, null, 2)) + 1 });
  };
  put('config.json', model.config);
  put('generation_config.json', model.generationConfig);
  put('tokenizer.json', model.tokenizerJson);
  put('tokenizer_config.json', model.tokenizerConfig);
  for (const dtype of DTYPES.filter((d) => dtypes.includes(d))) {
    // One variant at a time: peak memory is the fp32 weights plus one encoded graph.
    const encoded = encodeModel(buildLlamaModel(model.shape, model.weights, dtype));
    // protobuf messages stop at 2 GiB; bigger graphs need external data files, which the engine does not load.
    if (encoded.length >= 2 ** 31)
      throw new Error(
        `the ${dtype} graph would be ${(encoded.length / 2 ** 30).toFixed(2)} GiB, past ONNX's 2 GiB single-file limit: import with --dtype fp16, int8 or q4`,
      );
    writeEncoded(join(outDir, 'onnx', ONNX_FILE[dtype]), encoded);
    written.push({ file: `onnx/${ONNX_FILE[dtype]}`, bytes: encoded.length });
  }
  return written;
}

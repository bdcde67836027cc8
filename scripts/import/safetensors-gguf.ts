// `model:import -- safetensors` of Qwen2, Qwen3 and text-only Gemma 3, whose blocks our ONNX graph does not
// compute: the checkpoint is written as a GGUF file the way llama.cpp's convert_hf_to_gguf.py writes these
// architectures (gguf-writer.ts: its tensor names, q/k rows left in NEOX order, Gemma's norms + 1, the
// tokenizer as metadata), straight into the folder as model.gguf, which the kernels run in Node and in workerd.
// The header is then read back and checked as `model:import gguf` checks a file (gguf-config.ts), and
// config.json is what that import makes of it. The tokenizer files are the checkpoint's own, copied rather than
// rebuilt from the metadata: they are what the model was trained with, chat template included, where the
// rebuilt ones are llama.cpp's reading of them (which parts from tokenizer.json in places: gguf-tokenizer.ts).
import { existsSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { hfTokenizerMeta } from '../model/gguf-tokenizer-hf.js';
import { writeLlamaGguf, type GgufFileType, type TokenizerJson } from '../model/gguf-writer.js';
import type { LlamaShape } from '../model/presets.js';
import type { Dtype } from '../model/weight-ops.js';
import { ggufConfigJson, ggufLlamaShape } from './gguf-config.js';
import { GGUF_FILE, readGgufFileHeader, writeGgufFolderFiles } from './gguf.js';
import { ggufShapeFromHfConfig } from './hf-architectures.js';
import { weightsFromHf } from './hf-llama.js';
import { SafetensorsCheckpoint } from './safetensors.js';

/** The GGUF type of each --dtype: every matrix (the embedding too) in it, norms and biases in F32. */
export const GGUF_TYPE_OF_DTYPE: Readonly<Record<Dtype, GgufFileType>> = {
  fp32: 'F32',
  fp16: 'F16',
  int8: 'Q8_0',
  q4: 'Q4_0',
};

/** The JSON files of a Hugging Face folder. */
export interface HfFolderJson {
  config: Record<string, unknown>;
  generationConfig: Record<string, unknown>;
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
}

const readJson = (path: string, optional = false): Record<string, unknown> => {
  if (optional && !existsSync(path)) return {};
  if (!existsSync(path)) throw new Error(`${path} is missing`);
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
};

/** A Hugging Face folder's JSON files (generation_config.json may be absent). */
export const readHfFolderJson = (dir: string): HfFolderJson => ({
  config: readJson(join(dir, 'config.json')),
  generationConfig: readJson(join(dir, 'generation_config.json'), true),
  tokenizerJson: readJson(join(dir, 'tokenizer.json')),
  tokenizerConfig: readJson(join(dir, 'tokenizer_config.json')),
});

/** The shape, or a refusal naming what is not imported, from config.json alone (model:pull asks before downloading). */
export function checkGgufImport(config: Record<string, unknown>, dtypes: readonly Dtype[]): LlamaShape {
  const shape = ggufShapeFromHfConfig(config);
  if (dtypes.length !== 1)
    throw new Error(
      `--dtype ${dtypes.join(',')}: a ${config.model_type} checkpoint becomes one GGUF file (model.gguf) of one type; import each dtype into a folder of its own`,
    );
  return shape;
}

/**
 * Writes `outDir` from the checkpoint in `dir`; returns the files written with their sizes. `name` is the
 * file's general.name: the folder's name, as the converter takes it, unless the caller knows better (model:pull
 * converts in a staging folder and names the repo, so its folder is the bytes an import by hand writes).
 */
export async function importSafetensorsAsGguf(
  dir: string,
  json: HfFolderJson,
  outDir: string,
  dtypes: readonly Dtype[],
  name = basename(resolve(dir)),
): Promise<{ file: string; bytes: number }[]> {
  const { config, tokenizerJson, tokenizerConfig } = json;
  const shape = checkGgufImport(config, dtypes);
  // The tokenizer is checked before the weights are read: one a GGUF file cannot describe is refused at once.
  const tokenizerMeta = hfTokenizerMeta({
    tokenizerJson,
    tokenizerConfig,
    vocabSize: shape.vocabSize,
    modelConfig: config,
  });
  const weights = weightsFromHf(SafetensorsCheckpoint.open(dir), shape);
  mkdirSync(outDir, { recursive: true });
  const path = join(outDir, GGUF_FILE);
  try {
    // input.tokenizer is only read when tokenizerMeta is not given.
    const input = { name, shape, weights, tokenizer: tokenizerJson as unknown as TokenizerJson };
    writeLlamaGguf(path, input, GGUF_TYPE_OF_DTYPE[dtypes[0]], { tokenizerMeta });
    const written = writeGgufFolderFiles(outDir, {
      ...json,
      config: ggufConfigJson(
        ggufLlamaShape(await readGgufFileHeader(path)),
        (config.bos_token_id ?? null) as number | null,
        (config.eos_token_id ?? null) as number | number[] | null,
      ),
    });
    return [...written, { file: GGUF_FILE, bytes: statSync(path).size }];
  } catch (e) {
    rmSync(path, { force: true });
    throw e;
  }
}

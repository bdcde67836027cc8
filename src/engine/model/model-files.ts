import { InvalidRequestError } from '../errors.js';
import { parseModelConfig, type ModelConfig } from './config.js';

/**
 * Where model files come from. Only bytes cross this boundary, so a folder on disk, an R2 bucket and
 * static assets all serve the same loader. `read` answers null for a file that does not exist.
 */
export interface ModelSource {
  read(path: string): Promise<Uint8Array | null>;
}

/**
 * Weight formats a model folder may hold; each is its own graph with the same inputs and outputs. The
 * first four are what model:make and model:import write; the others are onnx-community's export names
 * (q4f16: 4-bit weights with fp16 activations and KV; uint8 / quantized: 8-bit dynamic quantisation; bnb4).
 */
export type ModelDtype = 'fp32' | 'fp16' | 'int8' | 'q4' | 'q4f16' | 'uint8' | 'quantized' | 'bnb4';
export const MODEL_DTYPES: readonly ModelDtype[] = ['fp32', 'fp16', 'int8', 'q4', 'q4f16', 'uint8', 'quantized', 'bnb4'];

/** File name of each variant inside `onnx/`, as transformers.js names them. */
export function onnxFileFor(dtype: ModelDtype): string {
  return dtype === 'fp32' ? 'onnx/model.onnx' : `onnx/model_${dtype}.onnx`;
}

export interface ModelFiles {
  config: ModelConfig;
  rawConfig: Record<string, unknown>;
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  onnx: Uint8Array;
  dtype: ModelDtype;
}

async function required(source: ModelSource, path: string): Promise<Uint8Array> {
  const bytes = await source.read(path);
  if (!bytes) throw new InvalidRequestError('model', `model file ${path} is missing`, 'model_not_found');
  return bytes;
}

async function json(source: ModelSource, path: string, optional = false): Promise<Record<string, unknown>> {
  const bytes = optional ? await source.read(path) : await required(source, path);
  if (!bytes) return {};
  return JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
}

/** Loads a Hugging Face-layout model folder (config, tokenizer and one ONNX variant) from any source. */
export async function loadModelFiles(source: ModelSource, dtype: ModelDtype = 'fp32'): Promise<ModelFiles> {
  const [rawConfig, generationConfig, tokenizerJson, tokenizerConfig, onnx] = await Promise.all([
    json(source, 'config.json'),
    json(source, 'generation_config.json', true),
    json(source, 'tokenizer.json'),
    json(source, 'tokenizer_config.json'),
    required(source, onnxFileFor(dtype)),
  ]);
  return { config: parseModelConfig(rawConfig, generationConfig), rawConfig, tokenizerJson, tokenizerConfig, onnx, dtype };
}

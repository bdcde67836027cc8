import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LlamaReference, type LlamaConfig } from './llama-reference';
import { readOnnxWeights } from './onnx-weights';

// Kept apart from llama-reference.ts so that the reference itself runs where there is no disk (workerd).
/** Reads <modelDir>/config.json and <modelDir>/onnx/model.onnx (fp32) into a fresh reference. */
export async function loadReference(modelDir: string): Promise<LlamaReference> {
  const config = JSON.parse(await readFile(join(modelDir, 'config.json'), 'utf8')) as LlamaConfig;
  const bytes = await readFile(join(modelDir, 'onnx', 'model.onnx'));
  const model = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return new LlamaReference(config, readOnnxWeights(model));
}

import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidRequestError } from '../../src/engine/errors.js';

/**
 * The weight variants a model folder holds, by dtype: `onnx/model.onnx` is fp32, `onnx/model_<d>.onnx` is d,
 * and a GGUF file (`model.gguf`) is `gguf`.
 */
export function weightVariants(dir: string): string[] {
  const onnx = existsSync(join(dir, 'onnx')) ? readdirSync(join(dir, 'onnx')) : [];
  const variants = onnx.flatMap((f) => {
    const m = /^model(?:_(\w+))?\.onnx$/.exec(f);
    return m ? [m[1] ?? 'fp32'] : [];
  });
  if (existsSync(join(dir, 'model.gguf'))) variants.push('gguf');
  return variants.sort();
}

/** The dtype to run when none is asked for: the folder's only weights, else fp32 if it has them. */
export function onlyWeights(dir: string): string {
  const variants = weightVariants(dir);
  if (variants.length === 1) return variants[0];
  if (variants.includes('fp32')) return 'fp32';
  throw new InvalidRequestError(
    'dtype',
    variants.length === 0
      ? `${dir} holds no weights (onnx/model*.onnx or model.gguf)`
      : `${dir} holds several weight variants (${variants.join(', ')}): choose one with --dtype`,
  );
}

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidRequestError } from '../../src/engine/errors.js';
import { chooseWeights, type WeightsChoice } from '../../src/engine/model/default-weights.js';
import { directorySource } from '../../src/sources/directory-source.js';

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

/**
 * The weights a folder on disk runs: the one rule the engine and the service use (src/engine/model/default-weights.ts),
 * `asked` being --dtype. Refuses a folder without config.json, naming it.
 */
export async function folderWeights(dir: string, asked?: string): Promise<WeightsChoice> {
  const configPath = join(dir, 'config.json');
  if (!existsSync(configPath))
    throw new InvalidRequestError(
      'model',
      `${dir} is not a model folder: it has no config.json (make one with npm run model:import, model:pull or model:make)`,
    );
  const rawConfig = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
  return chooseWeights(directorySource(dir), rawConfig, asked, '--dtype');
}

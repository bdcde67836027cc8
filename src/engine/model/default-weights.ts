// The one rule for which weights a model folder runs, used by `npm run generate`, Engine.load, the service's
// start-time check and `npm run deploy` alike, so a folder never runs one file on the command line and
// another (or none) in the server.
import { InvalidRequestError } from '../errors.js';
import { fileExists, weightsFileFor, type ModelDtype, type ModelSource } from './model-files.js';

/** Every weights variant a folder may hold, in the order messages list them. */
export const WEIGHT_DTYPES: readonly ModelDtype[] = [
  'fp32',
  'fp16',
  'int8',
  'q4',
  'q4f16',
  'uint8',
  'quantized',
  'bnb4',
  'gguf',
];

/** A weights file of a folder: its dtype and its path inside the folder. */
export interface WeightsFile {
  dtype: ModelDtype;
  file: string;
}

/** Why a choice was made, for the start report: asked for by name, the only one, the GGUF, or fp32 among several. */
export type WeightsReason = 'asked' | 'only' | 'gguf' | 'fp32';

export interface WeightsChoice extends WeightsFile {
  reason: WeightsReason;
  /** Every variant the folder holds (only probed when none was asked for, or the asked one is absent). */
  present: readonly WeightsFile[];
}

/** The weights files `source` holds, in WEIGHT_DTYPES order (one existence check per variant). */
export async function weightsPresent(source: ModelSource, rawConfig: Record<string, unknown>): Promise<WeightsFile[]> {
  const all = WEIGHT_DTYPES.map((dtype) => ({ dtype, file: weightsFileFor(dtype, rawConfig) }));
  const found = await Promise.all(all.map((w) => fileExists(source, w.file)));
  return all.filter((_, i) => found[i]);
}

const listed = (files: readonly WeightsFile[]): string => files.map((w) => `${w.dtype} (${w.file})`).join(', ');

/**
 * The weights to run: `asked` when given (refused, listing what the folder has, when its file is absent);
 * else the folder's only weights, else its GGUF, else fp32, else a refusal that lists the weights the folder
 * has and names `option`, the setting that picks one (`MODEL_DTYPE` in the service, `--dtype` on the command line).
 * A GGUF file config.json names settles it at once (it is the only file or the preferred one), so a GGUF
 * folder costs one existence check.
 */
export async function chooseWeights(
  source: ModelSource,
  rawConfig: Record<string, unknown>,
  asked?: string,
  option = 'dtype',
): Promise<WeightsChoice> {
  const where = source.where ? ` in ${source.where}` : '';
  if (asked !== undefined && asked !== '') {
    const file = weightsFileFor(asked as ModelDtype, rawConfig);
    if (await fileExists(source, file)) return { dtype: asked as ModelDtype, file, reason: 'asked', present: [] };
    const present = await weightsPresent(source, rawConfig);
    const have = present.length === 0 ? 'the folder holds no weights' : `the folder holds ${listed(present)}`;
    const pick = present.length === 0 ? '' : `: set ${option} to ${present.map((w) => w.dtype).join(' or ')}`;
    throw new InvalidRequestError(
      'model',
      `${option}=${asked} asks for ${file}, which is missing${where}; ${have}${pick}`,
      'model_not_found',
    );
  }
  const gguf = { dtype: 'gguf' as const, file: weightsFileFor('gguf', rawConfig) };
  if (typeof rawConfig.gguf_file === 'string' && (await fileExists(source, gguf.file)))
    return { ...gguf, reason: 'gguf', present: [gguf] };
  const present = await weightsPresent(source, rawConfig);
  if (present.length === 1) return { ...present[0], reason: 'only', present };
  const preferred = present.find((w) => w.dtype === 'gguf') ?? present.find((w) => w.dtype === 'fp32');
  if (preferred) return { ...preferred, reason: preferred.dtype === 'gguf' ? 'gguf' : 'fp32', present };
  throw new InvalidRequestError(
    'model',
    present.length === 0
      ? `no weights${where}: looked for ${WEIGHT_DTYPES.map((d) => weightsFileFor(d, rawConfig)).join(', ')}`
      : `several weights${where} and no fp32 or GGUF among them: ${listed(present)}; choose one with ${option} (${option}=${present[0].dtype})`,
    'model_not_found',
  );
}

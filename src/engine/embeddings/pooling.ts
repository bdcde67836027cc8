import type { ModelSource } from '../model/model-files.js';

/** Which positions' final hidden states make a text's vector. */
export type PoolingMode = 'mean' | 'cls' | 'last';

/** How the model declares its embeddings are made from its final-normed hidden states. */
export interface Pooling {
  mode: PoolingMode;
  /** L2-normalised after pooling (sentence-transformers' Normalize module, or the decoder default). */
  normalize: boolean;
  /** Where the declaration came from, for messages and docs: `modules.json` or `default`. */
  declaredBy: 'modules.json' | 'default';
  /** Why this model's declaration cannot be served (a pooling mode we do not implement); undefined when it can. */
  unsupported?: string;
}

/** A decoder model that declares nothing: its last token's state, L2-normalised (Qwen3-Embedding's, E5-Mistral's). */
export const DEFAULT_POOLING: Pooling = { mode: 'last', normalize: true, declaredBy: 'default' };

interface StModule {
  path?: string;
  type?: string;
}

/**
 * The pooling a model folder declares: sentence-transformers' `modules.json` (a Pooling module with its
 * `<path>/config.json`, and a Normalize module), else the decoder default. Read once at load.
 */
export async function readPooling(source: ModelSource): Promise<Pooling> {
  const modulesBytes = await source.read('modules.json');
  if (!modulesBytes) return DEFAULT_POOLING;
  const modules = JSON.parse(new TextDecoder().decode(modulesBytes)) as StModule[];
  if (!Array.isArray(modules)) return { ...DEFAULT_POOLING, unsupported: 'modules.json is not a list of modules' };
  const normalize = modules.some((m) => m.type?.endsWith('.Normalize'));
  const pooling = modules.find((m) => m.type?.endsWith('.Pooling'));
  if (!pooling) return { mode: 'last', normalize, declaredBy: 'modules.json' };
  const path = `${pooling.path ?? '1_Pooling'}/config.json`;
  const configBytes = await source.read(path);
  if (!configBytes)
    return {
      ...DEFAULT_POOLING,
      declaredBy: 'modules.json',
      unsupported: `modules.json names ${path}, which is missing`,
    };
  const config = JSON.parse(new TextDecoder().decode(configBytes)) as Record<string, unknown>;
  const modes = (
    [
      ['pooling_mode_mean_tokens', 'mean'],
      ['pooling_mode_cls_token', 'cls'],
      ['pooling_mode_lasttoken', 'last'],
    ] as const
  ).filter(([key]) => config[key] === true);
  const others = ['pooling_mode_max_tokens', 'pooling_mode_mean_sqrt_len_tokens', 'pooling_mode_weightedmean_tokens'];
  const unknown = others.filter((key) => config[key] === true);
  if (modes.length !== 1 || unknown.length > 0)
    return {
      ...DEFAULT_POOLING,
      declaredBy: 'modules.json',
      unsupported: `${path} asks for ${[...modes.map(([k]) => k), ...unknown].join(' + ') || 'no pooling mode'}; one of mean, cls or last token is supported`,
    };
  return { mode: modes[0][1], normalize, declaredBy: 'modules.json' };
}

/**
 * One text's vector, built as its prompt's hidden states arrive (a long prompt is prefilled in chunks): summed
 * in float64 in position order, so the vector is the same however the prompt was split across passes.
 */
export class PooledVector {
  private readonly acc: Float64Array;
  private count = 0;

  constructor(
    private readonly pooling: Pooling,
    private readonly hiddenSize: number,
    private readonly length: number,
  ) {
    this.acc = new Float64Array(hiddenSize);
  }

  /** The hidden states (fed, hidden) of positions [start, start + fed). */
  add(hidden: Float32Array, start: number): void {
    const H = this.hiddenSize;
    const fed = hidden.length / H;
    for (let t = 0; t < fed; t++) {
      const pos = start + t;
      const take =
        this.pooling.mode === 'mean' ||
        (this.pooling.mode === 'cls' && pos === 0) ||
        (this.pooling.mode === 'last' && pos === this.length - 1);
      if (!take) continue;
      for (let i = 0; i < H; i++) this.acc[i] += hidden[t * H + i];
      this.count++;
    }
  }

  /** The vector, its first `dimensions` (default all) then L2-normalised where the pooling says. */
  finish(dimensions = this.hiddenSize): Float32Array {
    const v = this.acc.subarray(0, dimensions).map((x) => x / Math.max(1, this.count));
    if (this.pooling.normalize) {
      let sq = 0;
      for (const x of v) sq += x * x;
      const norm = Math.max(Math.sqrt(sq), 1e-12);
      for (let i = 0; i < v.length; i++) v[i] /= norm;
    }
    return Float32Array.from(v);
  }
}

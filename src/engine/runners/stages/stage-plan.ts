import type { ModelConfig } from '../../model/config.js';
import type { LayerSpan } from '../wasm/weights/llama-weights.js';

/**
 * Bytes of each layer on a stage: its weights (estimated from the shapes and the weights file's bytes per
 * parameter, before any weight is read) and its share of the KV pool.
 */
export function layerCosts(config: ModelConfig, fileBytes: number | undefined, kvPoolBytes: number): number[] {
  const { layerParams, perParam } = parameters(config, fileBytes);
  return Array.from({ length: config.numLayers }, () => layerParams * perParam + kvPoolBytes / config.numLayers);
}

/** Bytes of the ends (embedding, final norm, output projection), estimated like layerCosts. */
export function endsBytes(config: ModelConfig, fileBytes: number | undefined): number {
  const { endParams, perParam } = parameters(config, fileBytes);
  return endParams * perParam;
}

function parameters(config: ModelConfig, fileBytes: number | undefined) {
  const { hiddenSize: H, numHeads, numKvHeads, headDim, vocabSize, numLayers } = config;
  const I = config.intermediateSize ?? 4 * H;
  const layerParams = H * (numHeads + 2 * numKvHeads) * headDim + numHeads * headDim * H + 3 * H * I + 2 * H;
  const endParams = vocabSize * H * (config.tieWordEmbeddings ? 1 : 2) + H;
  // A file of unknown size: 4.5 bits a parameter (q4 with its scales), only the balance depends on it.
  const perParam = fileBytes === undefined ? 0.5625 : fileBytes / (numLayers * layerParams + endParams);
  return { layerParams, endParams, perParam };
}

/**
 * The vocabulary's rows over the stages, in near-equal runs: a table too large for the head's isolate (a
 * 128k-token vocabulary is 140 MiB at 4 bits) is a share of each stage's. An even split adds the same bytes
 * to every stage, so the layers' balance stands.
 */
export function splitVocabulary(spans: readonly LayerSpan[], vocabSize: number): LayerSpan[] {
  return spans.map((span, s) => ({
    ...span,
    ends: true,
    vocab: {
      from: Math.floor((s * vocabSize) / spans.length),
      to: Math.floor(((s + 1) * vocabSize) / spans.length),
    },
  }));
}

/** What the head holds of a model split over stages: the ends (embedding, final norm, output projection), no layer. */
export const HEAD_SPAN: LayerSpan = { from: 0, to: 0, ends: true };

/**
 * The model's layers on `stages` stages, contiguous ranges of at least one layer each, the largest stage's
 * bytes as small as can be (each must fit an isolate of the same size). Llama's layers are of one shape, so
 * this is near-equal counts; the costs say so rather than assume it.
 */
export function planStages(stages: number, costs: readonly number[]): LayerSpan[] {
  const L = costs.length;
  if (!Number.isInteger(stages) || stages < 1)
    throw new RangeError(`PIPELINE_STAGES must be a whole number >= 1, got ${stages}`);
  if (stages > L) throw new RangeError(`${stages} stages need at least ${stages} layers; the model has ${L}`);
  const prefix = [0];
  for (const b of costs) prefix.push(prefix.at(-1)! + b);
  // best[s][i]: the least possible largest stage when stages s.. hold layers i..; cut[s][i]: where stage s ends.
  const best = Array.from({ length: stages + 1 }, () => new Array<number>(L + 1).fill(Infinity));
  const cut = Array.from({ length: stages + 1 }, () => new Array<number>(L + 1).fill(-1));
  best[stages][L] = 0;
  for (let s = stages - 1; s >= 0; s--)
    for (let i = 0; i < L; i++)
      for (let j = i + 1, off = Infinity; j <= L; j++) {
        const worst = Math.max(prefix[j] - prefix[i], best[s + 1][j]);
        // Of the cuts as good, the one nearest an even share: no stage left with much less than the others.
        const fair = Math.abs(prefix[j] - prefix[i] - (prefix[L] - prefix[i]) / (stages - s));
        if (worst < best[s][i] || (worst === best[s][i] && fair < off)) {
          best[s][i] = worst;
          cut[s][i] = j;
          off = fair;
        }
      }
  const spans: LayerSpan[] = [];
  for (let s = 0, i = 0; s < stages; s++) {
    spans.push({ from: i, to: cut[s][i], ends: false });
    i = cut[s][i];
  }
  return spans;
}

import { InvalidRequestError } from '../errors.js';

export type EarlyStopping = boolean | 'never';

/** Beam search settings (HF's spelling of the stopping rule; vLLM's request fields). */
export interface BeamParams {
  /** Beams kept alive per step (k). */
  width: number;
  /** α: a finished candidate scores sum(log p) / length^α, length counting its generated tokens. */
  lengthPenalty: number;
  /**
   * true: stop once `width` candidates have finished. false: also stop when the best continuation, scored
   * at the current length, could not beat the worst kept candidate (HF's heuristic). 'never': stop only
   * when no live beam could beat it at any length up to max_tokens (exact).
   */
  earlyStopping: EarlyStopping;
}

export const DEFAULT_BEAM_WIDTH = 4;

/** The request fields beam search reads. */
export interface BeamInput {
  use_beam_search?: unknown;
  beam_width?: unknown;
  best_of?: unknown;
  length_penalty?: unknown;
  early_stopping?: unknown;
}

/**
 * Beam search is on with `use_beam_search: true` (vLLM) or a `beam_width`; its width is `beam_width`,
 * else `best_of` (vLLM's spelling), else max(n, 4). Off, its fields are refused rather than ignored.
 */
export function resolveBeamParams(input: BeamInput, n: number, maxWidth: number): BeamParams | undefined {
  const {
    use_beam_search: use,
    beam_width: beamWidth,
    best_of: bestOf,
    length_penalty: lengthPenalty,
    early_stopping: early,
  } = input;
  if (use !== undefined && use !== null && typeof use !== 'boolean') {
    throw new InvalidRequestError('use_beam_search', `use_beam_search must be a boolean, got ${JSON.stringify(use)}`);
  }
  const widthGiven = beamWidth !== undefined && beamWidth !== null;
  if (use === false && widthGiven)
    throw new InvalidRequestError('beam_width', 'beam_width is given but use_beam_search is false');
  const on = use === true || widthGiven;
  if (!on) {
    // best_of = n is OpenAI's default meaning (n candidates, n returned): nothing to do.
    for (const [param, value] of [
      ['best_of', bestOf === n ? undefined : bestOf],
      ['length_penalty', lengthPenalty],
      ['early_stopping', early],
    ] as const) {
      if (value !== undefined && value !== null) {
        throw new InvalidRequestError(
          param,
          `${param} applies to beam search only; set use_beam_search: true`,
          'unsupported_parameter',
        );
      }
    }
    return undefined;
  }
  if (widthGiven && bestOf !== undefined && bestOf !== null && bestOf !== beamWidth) {
    throw new InvalidRequestError(
      'best_of',
      `best_of (${JSON.stringify(bestOf)}) and beam_width (${JSON.stringify(beamWidth)}) both set the beam width; give one`,
    );
  }
  const widthParam = widthGiven ? 'beam_width' : 'best_of';
  const widthValue = widthParam === 'beam_width' ? beamWidth : (bestOf ?? Math.max(n, DEFAULT_BEAM_WIDTH));
  if (typeof widthValue !== 'number' || !Number.isSafeInteger(widthValue) || widthValue < 1 || widthValue > maxWidth) {
    throw new InvalidRequestError(
      widthParam,
      `${widthParam} must be an integer in [1, ${maxWidth}], got ${JSON.stringify(widthValue)}`,
    );
  }
  if (n > widthValue) throw new InvalidRequestError('n', `n (${n}) must not exceed the beam width (${widthValue})`);
  const alpha = lengthPenalty ?? 1;
  if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha < -10 || alpha > 10) {
    throw new InvalidRequestError(
      'length_penalty',
      `length_penalty must be a number in [-10, 10], got ${JSON.stringify(lengthPenalty)}`,
    );
  }
  const earlyStopping = early ?? false;
  if (earlyStopping !== true && earlyStopping !== false && earlyStopping !== 'never') {
    throw new InvalidRequestError(
      'early_stopping',
      `early_stopping must be true, false or "never", got ${JSON.stringify(early)}`,
    );
  }
  return { width: widthValue, lengthPenalty: alpha, earlyStopping };
}

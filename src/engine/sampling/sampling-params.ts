import { InvalidRequestError } from '../errors.js';

/**
 * Sampling settings after validation, in camelCase; every field is set. Neutral values switch a stage
 * off: temperature 1, topK 0, topP 1, minP 0, penalties 0, repetitionPenalty 1, empty logitBias.
 */
export interface SamplingParams {
  /** 0 = greedy; otherwise logits are divided by it. [0, 2] */
  temperature: number;
  /** Keep the k highest logits (ties with the kth kept too); 0 = off. */
  topK: number;
  /** Nucleus mass in (0, 1]; 1 = off. */
  topP: number;
  /** Keep tokens with probability >= minP x the top probability; 0 = off. [0, 1] */
  minP: number;
  /** OpenAI: logit -= count_in_generated x frequencyPenalty. [-2, 2] */
  frequencyPenalty: number;
  /** OpenAI: logit -= (count_in_generated > 0) x presencePenalty. [-2, 2] */
  presencePenalty: number;
  /** CTRL/HF, over prompt + generated tokens: positive logits divided, negative multiplied. (0, 2] */
  repetitionPenalty: number;
  /** token id -> value added to its logit, [-100, 100]. */
  logitBias: Map<number, number>;
  /** vLLM's allowed_token_ids: only these may be generated; undefined = all. */
  allowedTokenIds: ReadonlySet<number> | undefined;
  /** undefined = draw a fresh seed per request. */
  seed: number | undefined;
  logprobs: boolean;
  /** How many alternatives to report per token, [0, 20]; needs logprobs. */
  topLogprobs: number;
}

export const DEFAULT_SAMPLING: Readonly<SamplingParams> = Object.freeze({
  temperature: 1,
  topK: 0,
  topP: 1,
  minP: 0,
  frequencyPenalty: 0,
  presencePenalty: 0,
  repetitionPenalty: 1,
  logitBias: new Map<number, number>(),
  allowedTokenIds: undefined,
  seed: undefined,
  logprobs: false,
  topLogprobs: 0,
});

/**
 * The request fields this module reads, in OpenAI's (and vLLM's, for top_k / min_p /
 * repetition_penalty) spelling. Typed `unknown` on purpose: they arrive from JSON and are checked here.
 * `undefined` and `null` both mean "use the default", as OpenAI's schema marks these fields nullable.
 */
export interface SamplingInput {
  temperature?: unknown;
  top_k?: unknown;
  top_p?: unknown;
  min_p?: unknown;
  frequency_penalty?: unknown;
  presence_penalty?: unknown;
  repetition_penalty?: unknown;
  logit_bias?: unknown;
  allowed_token_ids?: unknown;
  seed?: unknown;
  logprobs?: unknown;
  top_logprobs?: unknown;
}

export const MAX_TOP_LOGPROBS = 20;
export const MAX_LOGIT_BIAS = 100;

const TOKEN_ID_KEY = /^(0|[1-9][0-9]*)$/;

/** A finite number or the default; anything else (string, NaN, Infinity, boolean, object) is refused. */
function finite(input: SamplingInput, param: keyof SamplingInput, fallback: number): number {
  const v = input[param];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new InvalidRequestError(param, `${param} must be a finite number, got ${describe(v)}`);
  }
  return v;
}

function integer(input: SamplingInput, param: keyof SamplingInput, fallback: number): number {
  const v = finite(input, param, fallback);
  if (!Number.isSafeInteger(v)) throw new InvalidRequestError(param, `${param} must be an integer, got ${v}`);
  return v;
}

function outOfRange(param: string, v: number, range: string): never {
  throw new InvalidRequestError(param, `${param} must be in ${range}, got ${v}`);
}

function describe(v: unknown): string {
  if (typeof v === 'number') return String(v);
  if (typeof v === 'string') return `a string (${JSON.stringify(v.slice(0, 32))})`;
  return Array.isArray(v) ? 'an array' : typeof v;
}

function resolveLogitBias(v: unknown, vocabSize: number): Map<number, number> {
  const bias = new Map<number, number>();
  if (v === undefined || v === null) return bias;
  if (typeof v !== 'object' || Array.isArray(v)) {
    throw new InvalidRequestError(
      'logit_bias',
      `logit_bias must be an object mapping token ids to numbers, got ${describe(v)}`,
    );
  }
  const entries = v instanceof Map ? [...v.entries()] : Object.entries(v as Record<string, unknown>);
  for (const [key, value] of entries) {
    const id = typeof key === 'number' ? key : TOKEN_ID_KEY.test(String(key)) ? Number(key) : NaN;
    if (!Number.isSafeInteger(id) || id < 0 || id >= vocabSize) {
      throw new InvalidRequestError(
        'logit_bias',
        `logit_bias key ${JSON.stringify(String(key))} is not a token id in [0, ${vocabSize})`,
      );
    }
    if (typeof value !== 'number' || !Number.isFinite(value) || value < -MAX_LOGIT_BIAS || value > MAX_LOGIT_BIAS) {
      throw new InvalidRequestError(
        'logit_bias',
        `logit_bias[${id}] must be a number in [-100, 100], got ${describe(value)}`,
      );
    }
    if (value !== 0) bias.set(id, value);
  }
  return bias;
}

function resolveAllowedTokenIds(v: unknown, vocabSize: number): Set<number> | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || v.length === 0) {
    throw new InvalidRequestError(
      'allowed_token_ids',
      `allowed_token_ids must be a non-empty array of token ids, got ${describe(v)}`,
    );
  }
  v.forEach((id: unknown, i) => {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0 || id >= vocabSize) {
      throw new InvalidRequestError(
        'allowed_token_ids',
        `allowed_token_ids[${i}] = ${describe(id)} is not a token id in [0, ${vocabSize})`,
      );
    }
  });
  return new Set(v as number[]);
}

/**
 * Checks every sampling field of a request and returns the resolved settings; throws
 * InvalidRequestError naming the first bad field (OpenAI spelling) before anything is computed.
 *
 * Ranges: temperature [0, 2]; top_p (0, 1]; top_k integer >= 1, or 0 / -1 = off (as vLLM);
 * min_p [0, 1]; frequency_penalty and presence_penalty [-2, 2]; repetition_penalty (0, 2] (1 = off;
 * above 2 is refused as it only ever wrecks the text); logit_bias keys decimal token ids in
 * [0, vocabSize), values [-100, 100]; allowed_token_ids a non-empty list of ids in [0, vocabSize); seed any safe integer; logprobs boolean; top_logprobs integer
 * [0, 20], and > 0 only together with logprobs: true (OpenAI).
 */
export function resolveSamplingParams(input: SamplingInput, vocabSize: number): SamplingParams {
  const temperature = finite(input, 'temperature', DEFAULT_SAMPLING.temperature);
  if (temperature < 0 || temperature > 2) outOfRange('temperature', temperature, '[0, 2]');

  const topKRaw = integer(input, 'top_k', DEFAULT_SAMPLING.topK);
  if (topKRaw < -1) outOfRange('top_k', topKRaw, '{-1, 0} (off) or integers >= 1');
  const topK = topKRaw === -1 ? 0 : topKRaw;

  const topP = finite(input, 'top_p', DEFAULT_SAMPLING.topP);
  if (!(topP > 0 && topP <= 1)) outOfRange('top_p', topP, '(0, 1]');

  const minP = finite(input, 'min_p', DEFAULT_SAMPLING.minP);
  if (minP < 0 || minP > 1) outOfRange('min_p', minP, '[0, 1]');

  const frequencyPenalty = finite(input, 'frequency_penalty', DEFAULT_SAMPLING.frequencyPenalty);
  if (frequencyPenalty < -2 || frequencyPenalty > 2) outOfRange('frequency_penalty', frequencyPenalty, '[-2, 2]');

  const presencePenalty = finite(input, 'presence_penalty', DEFAULT_SAMPLING.presencePenalty);
  if (presencePenalty < -2 || presencePenalty > 2) outOfRange('presence_penalty', presencePenalty, '[-2, 2]');

  const repetitionPenalty = finite(input, 'repetition_penalty', DEFAULT_SAMPLING.repetitionPenalty);
  if (!(repetitionPenalty > 0 && repetitionPenalty <= 2)) outOfRange('repetition_penalty', repetitionPenalty, '(0, 2]');

  const logitBias = resolveLogitBias(input.logit_bias, vocabSize);
  const allowedTokenIds = resolveAllowedTokenIds(input.allowed_token_ids, vocabSize);

  const seedRaw = input.seed;
  let seed: number | undefined;
  if (seedRaw !== undefined && seedRaw !== null) {
    if (typeof seedRaw !== 'number' || !Number.isSafeInteger(seedRaw)) {
      throw new InvalidRequestError('seed', `seed must be an integer, got ${describe(seedRaw)}`);
    }
    seed = seedRaw;
  }

  const logprobsRaw = input.logprobs;
  if (logprobsRaw !== undefined && logprobsRaw !== null && typeof logprobsRaw !== 'boolean') {
    throw new InvalidRequestError('logprobs', `logprobs must be a boolean, got ${describe(logprobsRaw)}`);
  }
  const logprobs = logprobsRaw === true;

  const topLogprobs = integer(input, 'top_logprobs', DEFAULT_SAMPLING.topLogprobs);
  if (topLogprobs < 0 || topLogprobs > MAX_TOP_LOGPROBS)
    outOfRange('top_logprobs', topLogprobs, `[0, ${MAX_TOP_LOGPROBS}]`);
  if (topLogprobs > 0 && !logprobs) {
    throw new InvalidRequestError('top_logprobs', 'top_logprobs needs logprobs: true');
  }

  return {
    temperature,
    topK,
    topP,
    minP,
    frequencyPenalty,
    presencePenalty,
    repetitionPenalty,
    logitBias,
    allowedTokenIds,
    seed,
    logprobs,
    topLogprobs,
  };
}

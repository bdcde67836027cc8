import type { GenerationRequest } from '../engine/request.js';
import type { JsonObject } from './body.js';
import { badParam } from './errors.js';
import { optBoolean, optInteger } from './request-params.js';

/**
 * OpenAI's chat `logprobs` + `top_logprobs` of a request body: whether to report them, and the engine's
 * fields asking for them (ranges are the engine's to check). Sessions use it; the playground tints tokens by it.
 */
export function logprobParams(body: JsonObject): {
  logprobs: boolean;
  fields: Pick<GenerationRequest, 'logprobs' | 'top_logprobs'>;
} {
  const logprobs = optBoolean(body, 'logprobs') ?? false;
  const top = optInteger(body, 'top_logprobs');
  if (top !== undefined && !logprobs)
    throw badParam('top_logprobs', 'top_logprobs requires logprobs: true', 'invalid_value');
  return { logprobs, fields: logprobs ? { logprobs: true, top_logprobs: top ?? 0 } : {} };
}

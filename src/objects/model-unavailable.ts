import { InvalidRequestError } from '../engine/errors.js';
import { modelLocations, modelName, type Env } from '../env.js';
import type { ServiceError } from './rpc-error.js';

/** How long a client is told to wait before asking again while the model is not loaded: the next request retries the load. */
export const MODEL_RETRY_AFTER_MS = 5_000;

/**
 * The 503 for a model this shard could not load (issue 44): the reason (a bad setting keeps its own code, e.g.
 * `unsupported_model`; anything else, a source that failed, stalled or sent a broken file, is
 * `model_unavailable`), where it was read from (never the URL itself, which may hold a token), and a
 * Retry-After, since the next request loads it again.
 */
export function modelUnavailable(env: Env, err: unknown): ServiceError {
  const places = modelLocations(env);
  const from = places.url ? 'MODEL_URL' : places.bucket ? 'the R2 bucket or the static assets' : 'the static assets';
  const said = err instanceof Error ? err.message : String(err);
  // The URL may carry a token: the client is told which setting, never its value.
  const base = places.url?.replace(/\/?$/, '/');
  const reason = base ? said.split(base).join('MODEL_URL/').split(places.url!).join('MODEL_URL') : said;
  if (!(err instanceof InvalidRequestError))
    console.error(`model "${modelName(env)}" failed to load from ${from}`, err);
  return {
    status: 503,
    type: 'server_error',
    message:
      err instanceof InvalidRequestError
        ? `model "${modelName(env)}" cannot be served: ${reason}`
        : `model "${modelName(env)}" could not be loaded from ${from}: ${reason}`,
    param: null,
    code: err instanceof InvalidRequestError ? err.code : 'model_unavailable',
    rateLimit: { retryAfterMs: MODEL_RETRY_AFTER_MS },
  };
}

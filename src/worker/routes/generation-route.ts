import type { Context } from 'hono';
import type { GenerationRequest } from '../../engine/request.js';
import type { AppEnv } from '../app-env.js';
import { type JsonObject, readJsonObject } from '../body.js';
import { type Collected, collect, type Generation, startGeneration } from '../generation-stream.js';
import { rateLimitHeaders, withRateLimitHeaders } from '../rate-limit-headers.js';
import { checkModelOrAdapter, refuseUnsupported } from '../request-params.js';
import { shardForPrompt } from '../routing.js';
import { type SseFraming, sseResponse } from '../sse.js';

/**
 * What the generation routes (chat, completions, responses) share around their own parameters: the body
 * read and its model checked, the generation started for the caller's key on its shard, and the answer
 * (streamed or collected) carrying the key's rate-limit headers.
 */
export type GenerationContext = Context<AppEnv>;

export interface GenerationBody {
  body: JsonObject;
  /** The model's name as asked (the served model's, or one of its adapters'), as the response reports it. */
  model: string;
  /** The LoRA adapter `model` names, where it is not the served model (the shard checks it exists). */
  adapter?: string;
}

/**
 * The body as a JSON object, its model checked, then the fields this route does not take refused: in
 * that order, so a request with several faults is answered with the first.
 */
export async function readGenerationBody(c: GenerationContext, unsupported: string[] = []): Promise<GenerationBody> {
  const body = await readJsonObject(c);
  const { model, adapter } = checkModelOrAdapter(body, c.env);
  refuseUnsupported(body, unsupported);
  return { body, model, adapter };
}

/**
 * Starts `requests` for the caller's key on the shard `routingText` hashes to (so prompts that share a
 * start meet its cached blocks); the shard admits or refuses it. Cancelled when the client disconnects.
 */
export function startOnPromptShard(
  c: GenerationContext,
  routingText: string,
  requests: GenerationRequest[],
): Promise<Generation> {
  return startGeneration(c.env, shardForPrompt(c.env, routingText), c.get('tenant'), requests, c.req.raw.signal);
}

/** The generation's `chunks` as server-sent events (cancelled with the client), with the key's rate-limit headers. */
export function streamedAnswer(generation: Generation, chunks: AsyncIterable<unknown>, framing?: SseFraming): Response {
  return withRateLimitHeaders(sseResponse(chunks, generation.cancel, framing), generation.rateLimit);
}

/** The JSON answer once all `choices` finished, with the key's rate-limit headers. */
export async function collectedAnswer(
  c: GenerationContext,
  generation: Generation,
  choices: number,
  render: (collected: Collected) => unknown,
): Promise<Response> {
  const collected = await collect(generation, choices);
  return c.json(render(collected) as object, 200, rateLimitHeaders(generation.rateLimit));
}

import { Hono } from 'hono';
import type { Env } from '../../env.js';
import { itemIds } from '../../responses/output-items.js';
import { responseView, type ResponseSpec } from '../../responses/response-view.js';
import type { AppEnv } from '../app-env.js';
import { ApiError, badParam, unwrap } from '../errors.js';
import { openGeneration } from '../generation-stream.js';
import { shardLimits } from '../limits.js';
import { rateLimitHeaders } from '../rate-limit-headers.js';
import { conversationShard } from './conversations.js';
import { responseEvents } from '../responses-stream.js';
import { responseRequest } from '../responses-request.js';
import { hash32, shardCount, shardStub } from '../routing.js';
import { issuedShard, issueId } from '../shard-ids.js';
import { RESPONSES_FRAMING } from '../sse.js';
import { readGenerationBody, streamedAnswer } from './generation-route.js';

/**
 * The Responses API: POST /v1/responses, GET|DELETE /v1/responses/:id, GET /v1/responses/:id/input_items.
 * A response lives on the shard its id names (`resp_<shard>.<random>`), beside the KV cache of its chain,
 * and belongs to the key that made it: to any other key it does not exist (404).
 */
const responses = new Hono<AppEnv>();

const PREFIX = 'resp_';

const notFound = (id: string, param: string | null = null): ApiError =>
  new ApiError(404, `no response '${id}'`, 'invalid_request_error', param, 'response_not_found');

/** The shard a response id names, or a 404 (nothing is started for an id this service never issued). */
async function shardOf(env: Env, id: string, param: string | null = null): Promise<number> {
  const shard = id.startsWith(PREFIX) ? await issuedShard(env, id.slice(PREFIX.length)) : null;
  if (shard === null) throw notFound(id, param);
  return shard;
}

responses.post('/', async (c) => {
  // `model` may name a LoRA adapter: the shard loads it (404 for one the model has not).
  const { body, model } = await readGenerationBody(c);
  const { stream, ...request } = responseRequest(body, model);
  // A chain stays on its first response's shard; a new one goes where its instructions' blocks are cached.
  // A response in a conversation runs on the conversation's shard, beside its items and cache.
  const shard =
    request.previous_response_id !== null
      ? await shardOf(c.env, request.previous_response_id, 'previous_response_id')
      : request.conversation !== null
        ? await conversationShard(c.env, request.conversation, 'conversation')
        : request.instructions !== null
          ? hash32(`system\n${request.instructions}`) % shardCount(c.env)
          : Math.floor(Math.random() * shardCount(c.env));
  const id = `${PREFIX}${await issueId(c.env, shard)}`;
  const spec: ResponseSpec = {
    ...request,
    id,
    created_at: Math.floor(Date.now() / 1000),
    input: request.input.map((item, i) => ({ ...item, id: itemIds.input(id, i) })),
  };
  const stub = shardStub(c.env, shard);
  const caller = { tenant: c.get('tenant'), limits: shardLimits(c.env, shard) };
  const generation = await openGeneration((channel) => stub.createResponse(spec, channel, caller), c.req.raw.signal);

  if (stream)
    return streamedAnswer(
      generation,
      responseEvents(generation.events, responseView(spec), generation.reasoning, spec.parse_tools),
      RESPONSES_FRAMING,
    );
  for await (const event of generation.events) {
    if (event.type === 'error') throw ApiError.from(event.error);
    if (event.type === 'done' && event.response)
      return c.json(event.response, 200, rateLimitHeaders(generation.rateLimit));
  }
  throw new ApiError(500, 'the response ended before it finished', 'server_error', null, 'generation_failed');
});

responses.get('/:id', async (c) => {
  const id = c.req.param('id');
  const stub = shardStub(c.env, await shardOf(c.env, id));
  return c.json(unwrap(await stub.getResponse(id, c.get('tenant'))));
});

responses.delete('/:id', async (c) => {
  const id = c.req.param('id');
  const stub = shardStub(c.env, await shardOf(c.env, id));
  return c.json(unwrap(await stub.deleteResponse(id, c.get('tenant'))));
});

/** The response's input items, newest first unless `order=asc`, paged by `limit` (1..100, default 20) and `after`. */
responses.get('/:id/input_items', async (c) => {
  const id = c.req.param('id');
  const stub = shardStub(c.env, await shardOf(c.env, id));
  const items = unwrap(await stub.responseInputItems(id, c.get('tenant')));
  const order = c.req.query('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw badParam('order', 'order must be "asc" or "desc"', 'invalid_value');
  const limitText = c.req.query('limit') ?? '20';
  const limit = Number(limitText);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 100)
    throw badParam('limit', 'limit must be a whole number from 1 to 100', 'invalid_value');
  const ordered = order === 'asc' ? items : [...items].reverse();
  const after = c.req.query('after');
  const from = after === undefined ? 0 : ordered.findIndex((item) => item.id === after) + 1;
  if (after !== undefined && from === 0)
    throw badParam('after', `no input item '${after}' in this response`, 'invalid_value');
  const data = ordered.slice(from, from + limit);
  return c.json({
    object: 'list',
    data,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
    has_more: from + limit < ordered.length,
  });
});

export default responses;

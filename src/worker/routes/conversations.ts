import { Hono, type Context } from 'hono';
import type { Env } from '../../env.js';
import type { ConversationItem } from '../../responses/conversation-items.js';
import type { AppEnv } from '../app-env.js';
import { readJsonObject, type JsonObject } from '../body.js';
import { ApiError, badParam, unwrap } from '../errors.js';
import { inputItems, responseMetadata } from '../responses-request.js';
import { shardLimits } from '../limits.js';
import { shardCount, shardStub } from '../routing.js';
import { issuedShard, issueId } from '../shard-ids.js';

/**
 * The Conversations API: POST /v1/conversations, GET|POST|DELETE /v1/conversations/:id,
 * GET|POST /v1/conversations/:id/items, GET|DELETE /v1/conversations/:id/items/:item_id. A conversation
 * lives on the shard its id names (`conv_<shard>.<random>`), beside the KV cache a response in it
 * continues (POST /v1/responses with `conversation`), and belongs to the key that made it (404 to others).
 */
const conversations = new Hono<AppEnv>();

export const CONVERSATION_PREFIX = 'conv_';
/** Items one create or add call may carry, as OpenAI allows. */
const MAX_ITEMS_PER_CALL = 20;

const notFound = (id: string, param: string | null = null): ApiError =>
  new ApiError(404, `no conversation '${id}'`, 'invalid_request_error', param, 'conversation_not_found');

/** The shard a conversation id names, or a 404 (nothing is started for an id this service never issued). */
export async function conversationShard(env: Env, id: string, param: string | null = null): Promise<number> {
  const shard = id.startsWith(CONVERSATION_PREFIX)
    ? await issuedShard(env, id.slice(CONVERSATION_PREFIX.length))
    : null;
  if (shard === null) throw notFound(id, param);
  return shard;
}

const hex = (bytes: number): string =>
  [...crypto.getRandomValues(new Uint8Array(bytes))].map((b) => b.toString(16).padStart(2, '0')).join('');

const PREFIXES: Record<ConversationItem['type'], string> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
  reasoning: 'rs',
};

/** `items` of a create or add body, read as a response's `input` is (same items, same errors, named `items`). */
function readItems(body: JsonObject, required: boolean): ConversationItem[] {
  const raw = body.items;
  if (raw === undefined || raw === null) {
    if (required) throw badParam('items', 'items is required');
    return [];
  }
  if (!Array.isArray(raw)) throw badParam('items', 'items must be an array of items');
  if (raw.length > MAX_ITEMS_PER_CALL)
    throw badParam(
      'items',
      `items has ${raw.length} items; at most ${MAX_ITEMS_PER_CALL} may be added at once`,
      'invalid_value',
    );
  if (raw.length === 0) {
    if (required) throw badParam('items', 'items must not be empty', 'invalid_value');
    return [];
  }
  try {
    const { input } = inputItems(raw);
    return input.map((item) => ({ ...item, id: `${PREFIXES[item.type]}_${hex(16)}` }));
  } catch (err) {
    if (err instanceof ApiError && err.param?.startsWith('input'))
      throw new ApiError(
        err.status,
        err.message.replace(/^input/, 'items'),
        err.type,
        err.param.replace(/^input/, 'items'),
        err.code,
      );
    throw err;
  }
}

function refuseUnknown(body: JsonObject, known: string[]): void {
  for (const key of Object.keys(body))
    if (!known.includes(key)) throw badParam(key, `unknown parameter '${key}'`, 'unknown_parameter');
}

conversations.post('/', async (c) => {
  const body = await readJsonObject(c);
  refuseUnknown(body, ['items', 'metadata']);
  const items = readItems(body, false);
  const metadata = responseMetadata(body.metadata);
  const shard = Math.floor(Math.random() * shardCount(c.env));
  const id = `${CONVERSATION_PREFIX}${await issueId(c.env, shard)}`;
  const who = { tenant: c.get('tenant'), limits: shardLimits(c.env, shard) };
  return c.json(unwrap(await shardStub(c.env, shard).createConversation(id, who, metadata, items)));
});

/** The conversation a route's `:id` names: its id, its shard's stub, and whom the request runs for there. */
async function target(c: Context<AppEnv>) {
  const id = c.req.param('id') ?? '';
  const shard = await conversationShard(c.env, id);
  return { id, stub: shardStub(c.env, shard), who: { tenant: c.get('tenant'), limits: shardLimits(c.env, shard) } };
}

conversations.get('/:id', async (c) => {
  const { id, stub, who } = await target(c);
  return c.json(unwrap(await stub.conversation({ op: 'get' }, id, who)));
});

conversations.post('/:id', async (c) => {
  const { id, stub, who } = await target(c);
  const body = await readJsonObject(c);
  refuseUnknown(body, ['metadata']);
  if (body.metadata === undefined) throw badParam('metadata', 'metadata is required');
  const metadata = responseMetadata(body.metadata);
  return c.json(unwrap(await stub.conversation({ op: 'update', metadata }, id, who)));
});

conversations.delete('/:id', async (c) => {
  const { id, stub, who } = await target(c);
  return c.json(unwrap(await stub.conversation({ op: 'delete' }, id, who)));
});

const list = (data: ConversationItem[], hasMore: boolean) => ({
  object: 'list',
  data,
  first_id: data[0]?.id ?? null,
  last_id: data.at(-1)?.id ?? null,
  has_more: hasMore,
});

conversations.post('/:id/items', async (c) => {
  const { id, stub, who } = await target(c);
  const body = await readJsonObject(c);
  refuseUnknown(body, ['items']);
  const items = readItems(body, true);
  const added = unwrap(await stub.conversation({ op: 'addItems', items }, id, who)) as ConversationItem[];
  return c.json(list(added, false));
});

/** The conversation's items, newest first unless `order=asc`, paged by `limit` (1..100, default 20) and `after`. */
conversations.get('/:id/items', async (c) => {
  const { id, stub, who } = await target(c);
  const order = c.req.query('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw badParam('order', 'order must be "asc" or "desc"', 'invalid_value');
  const limit = Number(c.req.query('limit') ?? '20');
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 100)
    throw badParam('limit', 'limit must be a whole number from 1 to 100', 'invalid_value');
  const items = unwrap(await stub.conversation({ op: 'items' }, id, who)) as ConversationItem[];
  const ordered = order === 'asc' ? items : [...items].reverse();
  const after = c.req.query('after');
  const from = after === undefined ? 0 : ordered.findIndex((item) => item.id === after) + 1;
  if (after !== undefined && from === 0)
    throw badParam('after', `no item '${after}' in this conversation`, 'invalid_value');
  return c.json(list(ordered.slice(from, from + limit), from + limit < ordered.length));
});

conversations.get('/:id/items/:item', async (c) => {
  const { id, stub, who } = await target(c);
  return c.json(unwrap(await stub.conversation({ op: 'getItem', itemId: c.req.param('item') }, id, who)));
});

conversations.delete('/:id/items/:item', async (c) => {
  const { id, stub, who } = await target(c);
  return c.json(unwrap(await stub.conversation({ op: 'deleteItem', itemId: c.req.param('item') }, id, who)));
});

export default conversations;

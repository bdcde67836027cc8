import { Hono } from 'hono';
import type { Env } from '../../env.js';
import { ApiError } from '../errors.js';
import { shardCount, shardStub } from '../routing.js';

/**
 * GET /v1/pool/{shard}: one shard's KV block pool (block states and references, block tables per sequence,
 * recent batch sizes) as JSON, for the playground's live picture. Behind the API key like the rest.
 */
const pool = new Hono<{ Bindings: Env }>();

pool.get('/:shard', async (c) => {
  const given = c.req.param('shard');
  const shard = /^\d{1,6}$/.test(given) ? Number(given) : NaN;
  if (!(shard < shardCount(c.env))) {
    throw new ApiError(
      404,
      `no shard '${given}': shards are 0 to ${shardCount(c.env) - 1}`,
      'invalid_request_error',
      'shard',
      'not_found',
    );
  }
  const view = await shardStub(c.env, shard).pool();
  // A live picture: never served from a cache.
  return c.json({ ...view, shard }, 200, { 'cache-control': 'no-store' });
});

export default pool;

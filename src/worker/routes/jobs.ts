import { Hono } from 'hono';
import type { Env } from '../../env.js';
import { ApiError, unwrap } from '../errors.js';
import { shardStub } from '../routing.js';
import { issuedShard } from '../shard-ids.js';

/** GET /v1/jobs/:id: a webhook job's status, delivery attempts and result. The id names its shard. */
const jobs = new Hono<{ Bindings: Env }>();

jobs.get('/:id', async (c) => {
  const id = c.req.param('id');
  const shard = await issuedShard(c.env, id);
  if (shard === null) throw new ApiError(404, `no job '${id}'`, 'invalid_request_error', null, 'job_not_found');
  return c.json(unwrap(await shardStub(c.env, shard).getJob(id)));
});

export default jobs;

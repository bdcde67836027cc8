import { Hono } from 'hono';
import type { AppEnv } from '../app-env.js';
import { ApiError, unwrap } from '../errors.js';
import { shardStub } from '../routing.js';
import { issuedShard } from '../shard-ids.js';

/**
 * GET /v1/jobs/:id: a webhook job's status, delivery attempts and result. The id names its shard; the job
 * is its hook owner's, and to any other key it does not exist (404).
 */
const jobs = new Hono<AppEnv>();

jobs.get('/:id', async (c) => {
  const id = c.req.param('id');
  const shard = await issuedShard(c.env, id);
  if (shard === null) throw new ApiError(404, `no job '${id}'`, 'invalid_request_error', null, 'job_not_found');
  return c.json(unwrap(await shardStub(c.env, shard).getJob(id, c.get('tenant'))));
});

export default jobs;

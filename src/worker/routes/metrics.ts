import { Hono } from 'hono';
import { serviceBackend, type Env } from '../../env.js';
import { renderMetrics } from '../metrics/render.js';
import { shardCount, shardStub } from '../routing.js';

/** GET /metrics: every shard's stats over RPC, in Prometheus text, labelled by shard. */
const metrics = new Hono<{ Bindings: Env }>();

metrics.get('/', async (c) => {
  const shards = await Promise.all(Array.from({ length: shardCount(c.env) }, (_, i) => shardStub(c.env, i).stats()));
  return c.text(renderMetrics(shards, serviceBackend(c.env)), 200, {
    'content-type': 'text/plain; version=0.0.4; charset=utf-8',
  });
});

export default metrics;

import { Hono } from 'hono';
import type { AppEnv } from './app-env.js';
import { requireApiKey } from './auth.js';
import { handleError, notFound } from './errors.js';
import chat from './routes/chat.js';
import completions from './routes/completions.js';
import metrics from './routes/metrics.js';
import models from './routes/models.js';
import sessions from './routes/sessions.js';
import hooks from './routes/hooks.js';
import jobs from './routes/jobs.js';
import playground from './routes/playground.js';
import pool from './routes/pool.js';

export type { AppEnv } from './app-env.js';

/**
 * The HTTP service: OpenAI-compatible routes in front of the InferenceObject shards. Each route module
 * is a small Hono app mounted here; errors of every kind leave through `handleError` in OpenAI's schema.
 */
const app = new Hono<AppEnv>();

app.onError(handleError);
app.notFound(notFound);

// The playground page (public: it holds no data; what it calls needs the key).
app.route('/', playground);

// Bearer keys guard the API and the metrics. Inbound webhooks (/v1/hooks/*) authenticate by signature
// instead, so they are not listed here.
for (const path of [
  '/v1/models',
  '/v1/models/*',
  '/v1/completions',
  '/v1/chat/*',
  '/v1/sessions',
  '/v1/sessions/*',
  '/v1/jobs/*',
  '/v1/pool/*',
  '/metrics',
]) {
  app.use(path, requireApiKey);
}

app.route('/v1/models', models);
app.route('/v1/completions', completions);
app.route('/v1/chat/completions', chat);
app.route('/metrics', metrics);

// Sessions, webhook-triggered generation and its jobs.
app.route('/v1/sessions', sessions);
app.route('/v1/hooks', hooks);
app.route('/v1/jobs', jobs);
// The shard's KV block pool, for the playground's picture.
app.route('/v1/pool', pool);

export default app;

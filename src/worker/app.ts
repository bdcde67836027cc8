import { Hono } from 'hono';
import type { AppEnv } from './app-env.js';
import { publicRoute, requireApiKey } from './auth.js';
import { handleError, notFound } from './errors.js';
import chat from './routes/chat.js';
import completions from './routes/completions.js';
import metrics from './routes/metrics.js';
import models from './routes/models.js';
import conversations from './routes/conversations.js';
import responses from './routes/responses.js';
import sessions from './routes/sessions.js';
import hooks from './routes/hooks.js';
import jobs from './routes/jobs.js';
import playground from './routes/playground.js';
import pool from './routes/pool.js';
import tokenize from './routes/tokenize.js';
import embeddings from './routes/embeddings.js';
import { corsMiddleware } from './cors.js';

export type { AppEnv } from './app-env.js';

/**
 * The HTTP service: OpenAI-compatible routes in front of the InferenceObject shards. Each route module
 * is a small Hono app mounted here; errors of every kind leave through `handleError` in OpenAI's schema.
 */
const app = new Hono<AppEnv>();

app.onError(handleError);
app.notFound(notFound);

// Every route is behind the bearer-key check unless publicRoute() names it, so a route added later is
// private unless someone decides otherwise (it was opt-in per path, nine listed). Inbound webhooks
// (POST /v1/hooks/:ref) authenticate by their signature instead; the playground page holds no data.
// CORS first: a browser's preflight carries no key (cors.ts; CORS_ORIGINS, any origin in dev mode).
app.use('*', corsMiddleware);
app.use('*', async (c, next) => (publicRoute(c.req.method, c.req.path) ? next() : requireApiKey(c, next)));

app.route('/', playground);
// Liveness, as vLLM's and llama.cpp's servers answer it (no key: load balancers and probes call it).
app.on(['GET', 'HEAD'], '/health', (c) => c.json({ status: 'ok' }));
// vLLM's /tokenize and /detokenize.
app.route('/', tokenize);
app.route('/v1/models', models);
app.route('/v1/completions', completions);
app.route('/v1/chat/completions', chat);
app.route('/v1/embeddings', embeddings);
app.route('/metrics', metrics);

// Sessions, webhook-triggered generation and its jobs.
app.route('/v1/sessions', sessions);
// The Responses API: a response is a session turn, a chain of them a session.
app.route('/v1/responses', responses);
// The Conversations API: a named, mutable session that responses continue.
app.route('/v1/conversations', conversations);
app.route('/v1/hooks', hooks);
app.route('/v1/jobs', jobs);
// The shard's KV block pool, for the playground's picture.
app.route('/v1/pool', pool);

export default app;

import { Hono } from 'hono';
import { modelName, serviceBackend, type Env } from '../../env.js';
import { ApiError } from '../errors.js';

/** GET /v1/models and GET /v1/models/:id: the one model this deployment serves. */
const models = new Hono<{ Bindings: Env }>();

// OpenAI's `created` is when the model was published; a fixed time keeps responses stable across isolates.
const CREATED = 1_767_225_600; // 2026-01-01T00:00:00Z

// `backend` (an extra field, as vLLM adds its own): what the shards run the model on, wasm or webgpu.
const card = (id: string, env: Env) => ({
  id,
  object: 'model' as const,
  created: CREATED,
  owned_by: 'edge-infer',
  backend: serviceBackend(env),
});

models.get('/', (c) => c.json({ object: 'list', data: [card(modelName(c.env), c.env)] }));

models.get('/:id', (c) => {
  const id = c.req.param('id');
  if (id !== modelName(c.env))
    throw new ApiError(404, `the model '${id}' does not exist`, 'invalid_request_error', 'model', 'model_not_found');
  return c.json(card(id, c.env));
});

export default models;

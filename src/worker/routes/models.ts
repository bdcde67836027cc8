import { Hono } from 'hono';
import { modelName, serviceBackend, type Env } from '../../env.js';
import { ApiError } from '../errors.js';
import type { GpuHostView } from '../../objects/inference-object.js';
import { shardCount, shardStub } from '../routing.js';

/** GET /v1/models and GET /v1/models/:id: the one model this deployment serves. */
const models = new Hono<{ Bindings: Env }>();

/** The model's context (vLLM's max_model_len): shard 0's, from its loaded engine or config.json. */
const maxModelLen = (env: Env): Promise<number | null> => shardStub(env, 0).maxModelLen();

/**
 * The runner the model runs on (`kernels` or `onnxruntime`): a loaded shard's, asked of every shard (none loads
 * its model for this), so it shows whether a graph fell back from the kernels to onnxruntime; every shard runs
 * one configuration, so the first answer is the answer. While none has loaded it, shard 0's plan from
 * config.json and the chosen weights (no weights read); null only where that cannot be known.
 */
async function modelRunner(env: Env): Promise<string | null> {
  const runners = await Promise.all(Array.from({ length: shardCount(env) }, (_, i) => shardStub(env, i).runner()));
  return runners.find((r) => r !== null) ?? shardStub(env, 0).plannedRunner();
}

/** The largest count of shards sharing one isolate's weights, among the loaded shards (null while none is). */
async function sharing(env: Env): Promise<number | null> {
  const uses = await Promise.all(Array.from({ length: shardCount(env) }, (_, i) => shardStub(env, i).isolate()));
  const objects = uses.flatMap((u) => (u ? [u.objects] : []));
  return objects.length ? Math.max(...objects) : null;
}

/** Each pipeline stage's layers and isolate (from the first loaded shard; every shard splits the model alike). */
async function pipeline(env: Env): Promise<{ layers: [number, number]; isolate_bytes: number | null }[] | null> {
  const all = await Promise.all(Array.from({ length: shardCount(env) }, (_, i) => shardStub(env, i).stages()));
  const stages = all.find((s) => s !== null);
  return stages
    ? stages.map((s) => ({ layers: [s.layers.from, s.layers.to], isolate_bytes: s.isolateBytes ?? null }))
    : null;
}

// Extra fields, as vLLM adds its own: `backend`, what the shards run the model on (wasm or webgpu), and
// `runner`, what runs the graph there (planned before a shard has loaded it, then the loaded one's).
// `weights`: loaded once per isolate and shared by every shard the platform runs there (`shared_by`, null
// until a shard has loaded them). `stages`: with PIPELINE_STAGES, each stage Worker's layers [from, to) and its
// isolate's counted bytes (null until a shard has loaded the model, and without stages).
const card = async (id: string, env: Env) => {
  const [runner, sharedBy, stages, host, contextLength] = await Promise.all([
    modelRunner(env),
    sharing(env),
    pipeline(env),
    gpuHost(env),
    maxModelLen(env),
  ]);
  return {
    id,
    object: 'model' as const,
    // As vLLM: the time of the answer (the model has no publication date of its own).
    created: Math.floor(Date.now() / 1000),
    owned_by: 'edge-infer',
    max_model_len: contextLength,
    backend: host?.backend ?? serviceBackend(env),
    runner,
    weights: host ? { shared: 'on the GPU host', shared_by: null } : { shared: 'per isolate', shared_by: sharedBy },
    stages,
    gpu_host: host,
  };
};

/**
 * With GPU_HOST_URL: what the host runs (runner, backend, adapter) and whether a shard has a session open there
 * (a loaded shard's view, else shard 0 asks the host); null without a host, or where it cannot be reached.
 */
async function gpuHost(env: Env): Promise<GpuHostView | null> {
  if (!env.GPU_HOST_URL?.trim()) return null;
  const all = await Promise.all(Array.from({ length: shardCount(env) }, (_, i) => shardStub(env, i).gpuHost()));
  return all.find((h) => h?.connected) ?? all.find((h) => h !== null) ?? null;
}

/**
 * A LoRA adapter of the served model, as vLLM lists one (`parent` the base model's id, `root` its own): the
 * names the model folder's adapters/index.json lists, asked of shard 0 (which reads the folder, loads nothing).
 */
const adapterCard = (id: string, base: string) => ({
  id,
  object: 'model' as const,
  created: Math.floor(Date.now() / 1000),
  owned_by: 'edge-infer',
  root: id,
  parent: base,
});

models.get('/', async (c) => {
  const base = modelName(c.env);
  const [card0, adapters] = await Promise.all([card(base, c.env), shardStub(c.env, 0).adapters()]);
  return c.json({ object: 'list', data: [card0, ...adapters.map((a) => adapterCard(a, base))] });
});

models.get('/:id', async (c) => {
  const id = c.req.param('id');
  const base = modelName(c.env);
  if (id === base) return c.json(await card(id, c.env));
  if ((await shardStub(c.env, 0).adapters()).includes(id)) return c.json(adapterCard(id, base));
  throw new ApiError(404, `the model '${id}' does not exist`, 'invalid_request_error', 'model', 'model_not_found');
});

export default models;

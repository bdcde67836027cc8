import type { Engine } from '../engine/engine.js';
import { chooseWeights } from '../engine/model/default-weights.js';
import type { ModelSource } from '../engine/model/model-files.js';
import { httpHostLink } from '../engine/runners/remote/host-link.js';
import { hostInfo } from '../engine/runners/remote/remote-runner.js';
import { plannedRunner } from '../engine/runners/runner-plan.js';
import { gpuHostVar, modelLocations, modelName, pipelineStagesVar, type Env } from '../env.js';
import { modelSourceFor } from '../sources/model-source.js';
import { shardRuntime } from './shard-runtime.js';

/**
 * What GET /v1/models says of the model a shard serves, read from its loaded engine when there is one, else
 * from the model's files or its GPU host, without ever loading it.
 */

/** A GPU host as /v1/models shows it: what runs the model there, and whether this shard has a session open. */
export interface GpuHostView {
  runner: string;
  backend: string | null;
  adapter: string | null;
  connected: boolean;
}

/**
 * The GPU host that runs the model (GPU_HOST_URL): as the loaded engine knows it, else asked of the host now
 * (no session opened, nothing loaded); null without one, or where it cannot be reached.
 */
export async function gpuHostView(env: Env, loaded: Engine | undefined): Promise<GpuHostView | null> {
  let host: ReturnType<typeof gpuHostVar>;
  try {
    host = gpuHostVar(env);
  } catch {
    return null; // misconfigured: the first request says how
  }
  if (!host) return null;
  const known = loaded?.runner.stats().host;
  if (known)
    return { runner: known.runner, backend: known.backend, adapter: known.adapter, connected: known.connected };
  try {
    const info = await hostInfo(httpHostLink(host.url, host.secret, 10_000));
    return { runner: info.runner, backend: info.backend, adapter: info.adapter, connected: false };
  } catch {
    return null;
  }
}

/** The model's folder and the config.json it declares, read without loading the model. */
export interface DeclaredModel {
  source: ModelSource;
  /** Null where the folder has no config.json. */
  config: Record<string, unknown> | null;
}

export async function readDeclaredModel(env: Env): Promise<DeclaredModel> {
  const { source } = await modelSourceFor(modelName(env), modelLocations(env));
  const bytes = await source.read('config.json');
  return { source, config: bytes && (JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>) };
}

/**
 * The runner the engine will run on before any shard has loaded it: planned from config.json and the weights
 * the folder's rule chooses (existence checks, no weights read; runner-plan.ts), or the GPU host's; null
 * where config.json is missing. Throws where the folder cannot be read or is refused.
 */
export async function planRunner(env: Env, declared: () => Promise<DeclaredModel>): Promise<string | null> {
  if (gpuHostVar(env)) return (await gpuHostView(env, undefined))?.runner ?? null;
  const { source, config: rawConfig } = await declared();
  if (!rawConfig) return null;
  const asked = env.MODEL_DTYPE?.trim() || undefined;
  const { dtype } = await chooseWeights(source, rawConfig, asked, 'MODEL_DTYPE');
  return plannedRunner(shardRuntime(env), dtype, rawConfig, pipelineStagesVar(env) > 0);
}

/** max_position_embeddings of a declared config.json (null where it has none that is a positive integer). */
export function declaredContext({ config }: DeclaredModel): number | null {
  const n = config?.max_position_embeddings;
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : null;
}

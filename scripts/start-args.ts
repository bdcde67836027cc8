/**
 * Vars `npm start` takes from the environment: the model's and the engine's, never the whole environment (it
 * may hold HF_TOKEN). MODEL_NAME is MODEL's older spelling; BACKEND picks the runner.
 */
export const MODEL_ENV_VARS = [
  'MODEL',
  'MODEL_NAME',
  'BACKEND',
  'SHARD_COUNT',
  'MAX_BATCH',
  'KV_STORE_MB',
  'MODEL_DTYPE',
  'MODEL_URL',
  'MEMORY_BUDGET_MB',
  'KV_CACHE_MB',
  'KV_DTYPE',
  'SPECULATIVE',
  'DRAFT_MODEL',
  'PIPELINE_STAGES',
] as const;

/** wrangler dev's arguments for `npm start`: its address, the model vars found in `env`, then the user's own. */
export function startArgs(env: NodeJS.ProcessEnv, extra: readonly string[]): string[] {
  const given = (flag: string) => extra.some((a) => a === flag || a.startsWith(`${flag}=`));
  const args = ['dev'];
  // Defaults only: wrangler refuses a flag given twice (`npm start -- --port 9000` must still work).
  if (!given('--ip')) args.push('--ip', '127.0.0.1');
  if (!given('--port')) args.push('--port', '8787');
  for (const name of MODEL_ENV_VARS) if (env[name]) args.push('--var', `${name}:${env[name]}`);
  return [...args, ...extra];
}

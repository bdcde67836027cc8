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
  'PIPELINE_MICROBATCHES',
  'PIPELINE_IN_FLIGHT',
  'PIPELINE_VOCAB',
] as const;

/** `--model NAME` (or `--model=NAME`), which wrangler does not take, as the `--var MODEL:NAME` it stands for. */
export function modelFlag(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--model' && args[i + 1] !== undefined) out.push('--var', `MODEL:${args[++i]}`);
    else if (args[i].startsWith('--model=')) out.push('--var', `MODEL:${args[i].slice('--model='.length)}`);
    else out.push(args[i]);
  }
  return out;
}

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

/**
 * `--var PIPELINE_IN_FLIGHT:N` where stages are served and it is not set: the passes the head keeps in flight are
 * the stages that can compute at once, which here is the machine's. Stages in the head's one process share its one
 * thread (1); in processes of their own, at most one per core (measured on 2 cores, bench-360m on 3 stages: 2 in
 * flight gave 106-114 tok/s, 3 gave 91-96 and 4 gave 66, the waits between processes growing past the cores).
 * The Worker's own default, one per stage, is for the platform, where each stage object has a thread.
 */
export function inFlightArgs(vars: Record<string, string>, apart: boolean, cores: number): string[] {
  const stages = Number(vars.PIPELINE_STAGES);
  if (!(stages > 1) || vars.PIPELINE_IN_FLIGHT) return [];
  return ['--var', `PIPELINE_IN_FLIGHT:${apart ? Math.max(1, Math.min(stages, cores)) : 1}`];
}

/**
 * What `npm start` says before wrangler's own output: the model and the vars that choose how it is served, as
 * configured (wrangler's bindings table hides their values), and where to reach it.
 */
export function startLine(toml: string, args: readonly string[]): string {
  const vars = startVars(toml, args);
  const flag = (name: string, fallback: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : fallback;
  };
  const model = vars.MODEL_NAME || vars.MODEL;
  const chosen = ['MODEL_DTYPE', 'MODEL_URL', 'BACKEND', 'PIPELINE_STAGES', 'SHARD_COUNT', 'KV_CACHE_MB', 'KV_DTYPE']
    .filter((name) => vars[name])
    .map((name) => `${name}=${name === 'MODEL_URL' ? '(set)' : vars[name]}`);
  return `edge-infer: serving ${model}${chosen.length ? ` (${chosen.join(', ')})` : ''} on http://${flag('--ip', '127.0.0.1')}:${flag('--port', '8787')} (npm start -- --port N, --var NAME:VALUE)`;
}

/** The vars wrangler dev will serve with: wrangler.toml's [vars], then each `--var NAME:VALUE` of `args` over them. */
export function startVars(toml: string, args: readonly string[]): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const m of toml.matchAll(/^([A-Z_]+) = "([^"]*)"/gm)) vars[m[1]] = m[2];
  for (let i = 0; i < args.length; i++) {
    const spec = args[i] === '--var' ? args[i + 1] : undefined;
    const at = spec?.indexOf(':') ?? -1;
    if (spec && at > 0) vars[spec.slice(0, at)] = spec.slice(at + 1);
  }
  return vars;
}

/**
 * `--gpu` and `--gpu-backend B` taken out of npm start's arguments: whether to start a GPU host beside wrangler dev,
 * on which backend (default auto: WebGPU where a hardware adapter is, else the CPU runner the weights run fastest on).
 */
export function gpuArgs(args: readonly string[]): { gpu: { backend: string } | undefined; rest: string[] } {
  const rest: string[] = [];
  let on = false;
  let backend = 'auto';
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--gpu') on = true;
    else if (args[i] === '--gpu-backend') {
      on = true;
      backend = args[++i] ?? backend;
    } else if (args[i].startsWith('--gpu-backend=')) {
      on = true;
      backend = args[i].slice('--gpu-backend='.length);
    } else rest.push(args[i]);
  }
  return { gpu: on ? { backend } : undefined, rest };
}

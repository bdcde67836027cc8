// `npm start`: wrangler dev on 127.0.0.1:8787, with the model chosen from the environment, so
// `MODEL=smollm2-135m-instruct MODEL_DTYPE=q4 npm start` works as well as `npm start -- --var MODEL:...`.
// Only the model vars are taken from the environment (never the whole of it: it may hold HF_TOKEN).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

export const MODEL_ENV_VARS = ['MODEL', 'MODEL_DTYPE', 'MODEL_URL', 'MEMORY_BUDGET_MB', 'KV_CACHE_MB'] as const;

export function startArgs(env: NodeJS.ProcessEnv, extra: readonly string[]): string[] {
  const args = ['dev', '--ip', '127.0.0.1', '--port', '8787'];
  for (const name of MODEL_ENV_VARS) if (env[name]) args.push('--var', `${name}:${env[name]}`);
  return [...args, ...extra];
}

const wrangler = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');
const child = spawn(process.execPath, [wrangler, ...startArgs(process.env, process.argv.slice(2))], { stdio: 'inherit' });
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

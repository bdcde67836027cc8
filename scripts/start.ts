// `npm start`: wrangler dev on 127.0.0.1:8787, with the model chosen from the environment, so
// `MODEL=smollm2-135m-instruct MODEL_DTYPE=q4 npm start` works as well as `npm start -- --var MODEL:...`.
// Only the model vars are taken from the environment (never the whole of it: it may hold HF_TOKEN).
import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ignoreLargeModelFolders, leftOutMessage } from './import/assets-ignore.js';
import { ensureInspectorProxyPatched } from './lib/wrangler-inspector-patch.js';
import { readFileSync, rmSync } from 'node:fs';
import { freePort } from './lib/free-port.js';
import { pipelineConfigArgs, scriptName, stageScriptName } from './lib/stage-configs.js';
import { gpuArgs, inFlightArgs, MODEL_ENV_VARS, modelFlag, startArgs, startLine, startVars } from './start-args.js';
import { randomBytes } from 'node:crypto';
import { startGpuHostProcess } from './lib/gpu-host-process.js';
import { checkModel, ModelCheckError } from './lib/model-check.js';
import { answerHelp } from './lib/help.js';
import { ensureModels } from './ensure-models.js';

answerHelp(`Usage: npm start -- [--model NAME] [--port N] [--var NAME:VALUE]... [--stage-processes] [--gpu [--gpu-backend B]] [wrangler dev's options]
Serves the API with wrangler dev on http://127.0.0.1:8787 (dev mode: no API key, any origin may call it).
The model and engine settings come from --var NAME:VALUE or the environment: ${MODEL_ENV_VARS.join(', ')}
(e.g. MODEL=qwen3-mid npm start). --model NAME is --var MODEL:NAME. The model is checked before wrangler starts:
what the Worker would refuse is refused here, with the command that fixes it. --gpu starts a GPU host beside it and
points the objects at it (docs/webgpu.md#gpu-host). See docs/models.md and docs/deploy.md.`);
ensureModels();
for (const name of ignoreLargeModelFolders(fileURLToPath(new URL('../models', import.meta.url))))
  console.error(leftOutMessage(name));
const wrangler = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');
// --stage-processes: each pipeline stage in a wrangler dev process of its own (the dev registry connects them),
// so stages compute at once on a machine with cores to spare; else all of them in the head's one process.
// --gpu [--gpu-backend B]: a GPU host (scripts/gpu-host.ts) beside wrangler dev, serving the configured model, and
// the objects pointed at it (GPU_HOST_URL, and a fresh GPU_HOST_SECRET): docs/webgpu.md#gpu-host.
const { gpu, rest: given } = gpuArgs(process.argv.slice(2));
const apart = given.includes('--stage-processes');
const root = fileURLToPath(new URL('..', import.meta.url));
const toml = readFileSync(join(root, 'wrangler.toml'), 'utf8');
const userArgs = startArgs(process.env, modelFlag(given.filter((a) => a !== '--stage-processes')));
if (gpu) {
  const vars = startVars(toml, userArgs);
  const secret = randomBytes(24).toString('hex');
  const host = await startGpuHostProcess({
    model: vars.MODEL_NAME || vars.MODEL,
    dtype: vars.MODEL_DTYPE || undefined,
    backend: gpu.backend,
    port: await freePort(),
    secret,
    attached: true,
    onLine: (line) => console.error(line),
  });
  userArgs.push('--var', `GPU_HOST_URL:${host.url}`, '--var', `GPU_HOST_SECRET:${secret}`);
  process.on('exit', () => void host.stop());
}
const args = [...userArgs, ...inFlightArgs(startVars(toml, userArgs), apart, availableParallelism())];
// PIPELINE_STAGES: the head and each stage Worker, every one an isolate of its own. The stage scripts are named
// for this run (its process id): the dev registry finds a stage by script name, and an entry is one file per name,
// written by each process that serves it and deleted by each that stops. Shared names would let a second pipeline
// on this machine take the first's stages over, and its stop delete the entries the first still needs.
const tag = `s${process.pid}`;
const configs = pipelineConfigArgs(root, toml, args, tag);
const files = configs.filter((_, i) => i % 2 === 1);
// Quiet and offline: no telemetry, no update check (the banner's), no fetch of Request.cf's data (its stack trace
// on a machine without the internet looked like a failure); the configured model is said here instead.
const childEnv = {
  WRANGLER_SEND_METRICS: 'false',
  CLOUDFLARE_CF_FETCH_ENABLED: 'false',
  WRANGLER_HIDE_BANNER: 'true',
  ...process.env,
};
console.error(startLine(toml, args));
// The model as configured, looked at before wrangler dev starts: what the server would refuse is refused here.
const persistTo =
  args.find((a) => a.startsWith('--persist-to='))?.slice('--persist-to='.length) ??
  (args.includes('--persist-to') ? args[args.indexOf('--persist-to') + 1] : undefined);
try {
  const report = await checkModel(startVars(toml, args), {
    modelsDir: join(root, 'models'),
    persistRoot: persistTo ? resolve(persistTo) : join(root, '.wrangler', 'state'),
    root,
  });
  for (const line of report) console.error(`  ${line}`);
} catch (err) {
  if (!(err instanceof ModelCheckError)) throw err;
  console.error(`edge-infer: ${err.message}`);
  process.exit(1);
}
// What this run's names leave behind goes with it: the configs, and the stage objects' (empty) storage folders,
// under the head's persist folder or, for a stage run apart, the default one.
process.on('exit', () => {
  for (const file of files) rmSync(join(root, file), { force: true });
  for (let i = 1; i < files.length; i++)
    for (const state of new Set([
      persistTo ? resolve(persistTo) : join(root, '.wrangler', 'state'),
      join(root, '.wrangler', 'state'),
    ]))
      rmSync(join(state, 'v3', 'do', `${stageScriptName(scriptName(toml), i, tag)}-StageObject`), {
        recursive: true,
        force: true,
      });
});
// Without it a MODEL_URL weights file floods wrangler dev with sockets (scripts/lib/wrangler-inspector-patch.ts).
ensureInspectorProxyPatched();
const children: ChildProcess[] = [];
const run = (argv: string[]): ChildProcess => {
  const child = spawn(process.execPath, [wrangler, ...argv], { stdio: 'inherit', env: childEnv });
  children.push(child);
  return child;
};
if (apart && files.length > 1)
  for (const file of files.slice(1))
    run([
      'dev',
      '-c',
      file,
      '--ip',
      '127.0.0.1',
      '--port',
      String(await freePort()),
      '--inspector-port',
      String(await freePort()),
    ]);
const head = run([args[0], ...(apart ? ['-c', files[0] ?? 'wrangler.toml'] : configs), ...args.slice(1)]);
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => {
    for (const child of children) child.kill(signal);
  });
head.on('exit', (code, signal) => {
  for (const child of children) if (child !== head) child.kill('SIGTERM');
  process.exit(code ?? (signal ? 1 : 0));
});

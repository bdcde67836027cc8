// `npm start`: wrangler dev on 127.0.0.1:8787, with the model chosen from the environment, so
// `MODEL=smollm2-135m-instruct MODEL_DTYPE=q4 npm start` works as well as `npm start -- --var MODEL:...`.
// Only the model vars are taken from the environment (never the whole of it: it may hold HF_TOKEN).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ignoreLargeModelFolders } from './import/assets-ignore.js';
import { ensureInspectorProxyPatched } from './lib/wrangler-inspector-patch.js';
import { readFileSync } from 'node:fs';
import { pipelineConfigArgs } from './lib/stage-configs.js';
import { startArgs } from './start-args.js';

for (const name of ignoreLargeModelFolders(fileURLToPath(new URL('../models', import.meta.url)))) {
  console.error(
    `models/${name} has files over the 25 MiB asset cap: left out of the assets (models/.assetsignore); serve it from R2 with npm run model:upload -- models/${name}`,
  );
}
// Without it a MODEL_URL weights file floods wrangler dev with sockets (scripts/lib/wrangler-inspector-patch.ts).
ensureInspectorProxyPatched();
const wrangler = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');
const args = startArgs(process.env, process.argv.slice(2));
// PIPELINE_STAGES: the head and each stage Worker, every one an isolate of its own, in this one wrangler dev.
const root = fileURLToPath(new URL('..', import.meta.url));
const configs = pipelineConfigArgs(root, readFileSync(join(root, 'wrangler.toml'), 'utf8'), args);
const child = spawn(process.execPath, [wrangler, args[0], ...configs, ...args.slice(1)], {
  stdio: 'inherit',
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

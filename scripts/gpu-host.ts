// A GPU host: the process that holds a model's weights and its objects' KV bytes and computes their passes
// (docs/webgpu.md#gpu-host). npm run gpu-host -- --model <folder> [--port N] [--backend ...] (secret: --secret or
// GPU_HOST_SECRET). It runs whatever runner create-runner builds for the backend: WebGPU on a machine with a GPU.
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { resolveEngineLimits } from '../src/engine/defaults.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { ModelDtype } from '../src/engine/model/model-files.js';
import { loadHostModel } from '../src/gpu-host/host-model.js';
import { serveGpuHost } from '../src/gpu-host/server.js';
import { isNodeBackend, nodeRuntime, NODE_BACKENDS } from './lib/runtimes.js';
import { answerHelp } from './lib/help.js';

const USAGE = `usage: npm run gpu-host -- --model <folder> [--port 8790] [--hostname 127.0.0.1] [--name <model id>]
  [--backend auto|cpu|wasm|kernels|ort-wasm|webgpu] [--dtype fp32|q4|gguf|...] [--max-batch 16] [--max-tokens-per-step 512]
  [--secret S] (or GPU_HOST_SECRET in the environment: every call must carry it)
  [--adapter-cache-mb N] (LoRA adapters under the folder's adapters/ kept at once; default 16 where it has any)
  --model is a folder, or a name under ./models; objects reach the host as GPU_HOST_URL with GPU_HOST_SECRET.`;

answerHelp(USAGE);

const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    name: { type: 'string' },
    port: { type: 'string', default: '8790' },
    hostname: { type: 'string', default: '127.0.0.1' },
    backend: { type: 'string', default: 'auto' },
    dtype: { type: 'string' },
    secret: { type: 'string' },
    'max-batch': { type: 'string', default: '16' },
    'max-tokens-per-step': { type: 'string', default: '512' },
    'adapter-cache-mb': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});

const secret = args.secret ?? process.env.GPU_HOST_SECRET ?? '';
if (args.help || !args.model || !secret) {
  console.error(
    args.model && !secret ? `gpu-host: a secret is required (--secret or GPU_HOST_SECRET)\n${USAGE}` : USAGE,
  );
  process.exit(args.help ? 0 : 2);
}
if (!isNodeBackend(args.backend)) {
  console.error(`gpu-host: --backend must be one of ${NODE_BACKENDS.join(', ')}, got ${args.backend}`);
  process.exit(2);
}
const models = fileURLToPath(new URL('../models', import.meta.url));
const folder = existsSync(args.model) ? resolve(args.model) : join(models, args.model);
const adapterMb = args['adapter-cache-mb'] === undefined ? undefined : Number(args['adapter-cache-mb']);
if (adapterMb !== undefined && !(Number.isFinite(adapterMb) && adapterMb >= 0)) {
  console.error(`gpu-host: --adapter-cache-mb must be a number of MiB >= 0, got ${args['adapter-cache-mb']}`);
  process.exit(2);
}
const limits = resolveEngineLimits({
  maxBatchSize: Number(args['max-batch']),
  maxTokensPerStep: Number(args['max-tokens-per-step']),
});
try {
  const runtime = await nodeRuntime(args.backend, args.dtype);
  const model = await loadHostModel(runtime, folder, {
    name: args.name,
    dtype: args.dtype as ModelDtype | undefined,
    limits,
    adapterCacheBytes: adapterMb === undefined ? undefined : Math.round(adapterMb * 2 ** 20),
  });
  const running = await serveGpuHost(model, { secret, port: Number(args.port), hostname: args.hostname });
  const { info } = model;
  console.error(
    `gpu-host: serving ${info.model} (${model.dtype}) on ${running.url}: runner ${info.runner} on ${info.backend}${info.adapter ? `, adapter ${info.adapter}` : ''}${model.adapters?.capacityBytes ? `, LoRA adapters within ${model.adapters.capacityBytes / 2 ** 20} MiB` : ''}`,
  );
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.on(signal, () => void running.close().finally(() => process.exit(0)));
} catch (err) {
  if (!(err instanceof InvalidRequestError)) throw err;
  console.error(`gpu-host: ${err.message}`);
  process.exit(1);
}

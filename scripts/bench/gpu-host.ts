// The cost of running an object's passes on a GPU host, over loopback (docs/webgpu.md#gpu-host):
//   hop        = the pass's round trip seen from the object, minus the host's own compute: framing, HTTP, copies
//   no-op hop  = the same with a runner that computes nothing and returns zero logits (the protocol alone),
//                at SmolLM2-135M's vocabulary (49,152 logits a row: 192 KiB back per row)
//   tok/s      = a greedy completion at batch 1 through the host, beside the same engine on its own kernels
// In Node (the RemoteRunner in the process that runs the bench) and through workerd (wrangler dev, read from
// /metrics). npm run bench:gpu-host [-- --tokens 128]
import { randomBytes } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { resolveEngineLimits } from '../../src/engine/defaults.js';
import { Engine } from '../../src/engine/engine.js';
import type { ModelConfig } from '../../src/engine/model/config.js';
import type { ModelRunner, StepRow } from '../../src/engine/runners/model-runner.js';
import { httpHostLink } from '../../src/engine/runners/remote/host-link.js';
import { decodeFrame, encodeFrame, HOST_PATHS, HOST_PROTOCOL } from '../../src/engine/runners/remote/host-protocol.js';
import { loadHostModel } from '../../src/gpu-host/host-model.js';
import type { HostModel } from '../../src/gpu-host/gpu-host.js';
import { serveGpuHost } from '../../src/gpu-host/server.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { freePort } from '../lib/free-port.js';
import { startGpuHostProcess } from '../lib/gpu-host-process.js';
import { startDevServer } from '../lib/dev-server.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { answerHelp } from '../lib/help.js';

answerHelp(`Usage: npm run bench:gpu-host [-- --tokens 128] [--node-only]
The cost of running an object's passes on a GPU host over loopback: the hop per pass (and a no-op runner's), and
greedy tok/s at batch 1 through the host beside the same engine on its own kernels, in Node and through wrangler dev.`);

const { values: args } = parseArgs({
  options: { tokens: { type: 'string', default: '128' }, 'node-only': { type: 'boolean', default: false } },
});
const TOKENS = Number(args.tokens);
const MODELS_DIR = new URL('../../models/', import.meta.url).pathname;
const SECRET = randomBytes(16).toString('hex');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const fmt = (n: number, d = 2) => n.toFixed(d);

async function greedy(engine: Engine, tokens: number): Promise<number> {
  const t0 = performance.now();
  let n = 0;
  for await (const e of engine.generate({
    prompt: 'Once upon a time',
    max_tokens: tokens,
    temperature: 0,
    ignore_eos: true,
  }))
    if (e.type === 'token') n++;
  return n / ((performance.now() - t0) / 1000);
}

/** Node: an in-process host over loopback HTTP, against the same runner in one process. */
async function nodeRuns(model: string, dtype: 'q4'): Promise<string> {
  const runtime = await nodeRuntime('kernels');
  const hostModel = await loadHostModel(runtime, `${MODELS_DIR}${model}`, { dtype, limits: resolveEngineLimits({}) });
  const running = await serveGpuHost(hostModel, { secret: SECRET });
  const remote = await Engine.load(runtime, directorySource(`${MODELS_DIR}${model}`), {
    dtype,
    gpuHost: { link: httpHostLink(running.url, SECRET), model, kvDtype: 'fp32' },
  });
  const local = await Engine.load(runtime, directorySource(`${MODELS_DIR}${model}`), { dtype });
  await greedy(remote, 16);
  await greedy(local, 16);
  const before = remote.stats().host!;
  const hostTps = await greedy(remote, TOKENS);
  const after = remote.stats().host!;
  const localTps = await greedy(local, TOKENS);
  const passes = after.passes - before.passes;
  const hop = (after.passMs - before.passMs - (after.computeMs - before.computeMs)) / passes;
  await remote.runner.release();
  await local.runner.release();
  await running.close();
  return `| Node | ${model} (vocab ${hostModel.config.vocabSize}) | ${fmt(hop)} ms | ${fmt(hostTps, 0)} | ${fmt(localTps, 0)} |`;
}

/** The protocol alone: a host whose runner computes nothing, at a vocabulary of `vocab`, `batch` rows of one token. */
async function noOpHop(vocab: number, batch: number): Promise<{ median: number; p10: number }> {
  const config = { vocabSize: vocab, numLayers: 1, numKvHeads: 1, headDim: 64 } as ModelConfig;
  const logits = new Float32Array(vocab);
  const runner = {
    name: 'kernels',
    kvIdentity: 'none',
    deviceSampling: undefined,
    config,
    createKvMemory: () => ({ blockBytes: 0, copyBlock() {}, writeBlock() {}, readBlock: async () => new Uint8Array() }),
    forward: (rows: readonly StepRow[]) => {
      for (const { kv, tokens } of rows) kv.advance(tokens.length);
      return { at: () => logits, last: () => logits };
    },
    stats: () => ({ runner: 'kernels' as const }),
    release: async () => {},
  } as ModelRunner;
  const limits = resolveEngineLimits({ maxBatchSize: 64 });
  const model: HostModel = {
    info: { protocol: HOST_PROTOCOL, model: 'noop', runner: 'kernels', backend: 'none', adapter: null },
    config,
    dtype: 'fp32',
    digest: '',
    weightBytes: 0,
    limits,
    runner: async () => runner,
  };
  const running = await serveGpuHost(model, { secret: SECRET });
  const link = httpHostLink(running.url, SECRET);
  const open = { protocol: HOST_PROTOCOL, model: 'noop', numBlocks: 256, blockSize: 16, kvDtype: 'fp32', limits };
  const { epoch } = decodeFrame<{ epoch: string }>(await link.post(HOST_PATHS.open, encodeFrame(open))).header;
  const rows = Array.from({ length: batch }, (_, i) => ({ blocks: [i], start: 0, count: 1, logits: 1 }));
  const times: number[] = [];
  for (let i = 0; i < 300; i++) {
    const t0 = performance.now();
    const frame = encodeFrame({ epoch, rows, ops: [] }, [new Int32Array(batch)]);
    decodeFrame(await link.post(HOST_PATHS.pass, frame));
    if (i >= 50) times.push(performance.now() - t0);
  }
  await running.close();
  times.sort((a, b) => a - b);
  return { median: median(times), p10: times[Math.floor(times.length / 10)] };
}

/** workerd: wrangler dev with GPU_HOST_URL at a host process; the hop from /metrics, tok/s over HTTP. */
async function workerdRun(model: string, dtype: string): Promise<string> {
  const port = await freePort();
  const host = await startGpuHostProcess({ model, dtype, backend: 'kernels', port, secret: SECRET });
  const server = await startDevServer({
    MODEL: model,
    MODEL_DTYPE: dtype,
    SHARD_COUNT: '1',
    GPU_HOST_URL: host.url,
    GPU_HOST_SECRET: SECRET,
  });
  const local = await startDevServer({ MODEL: model, MODEL_DTYPE: dtype, SHARD_COUNT: '1' });
  const complete = async (url: string, max_tokens: number) => {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens, temperature: 0, ignore_eos: true }),
    });
    const body = (await res.json()) as { usage: { completion_tokens: number } };
    return body.usage.completion_tokens / ((performance.now() - t0) / 1000);
  };
  const read = async () => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const value = (name: string) =>
      Number(
        text
          .split('\n')
          .find((l) => l.startsWith(`${name}{`))
          ?.split(' ')
          .at(-1),
      );
    return {
      passes: value('edge_infer_gpu_host_passes_total'),
      pass: value('edge_infer_gpu_host_pass_seconds_total'),
      compute: value('edge_infer_gpu_host_compute_seconds_total'),
    };
  };
  try {
    await complete(server.url, 16);
    await complete(local.url, 16);
    const before = await read();
    const hostTps = await complete(server.url, TOKENS);
    const after = await read();
    const localTps = await complete(local.url, TOKENS);
    const hop = ((after.pass - before.pass - (after.compute - before.compute)) * 1000) / (after.passes - before.passes);
    return `| workerd (wrangler dev) | ${model} | ${fmt(hop)} ms | ${fmt(hostTps, 0)} | ${fmt(localTps, 0)} |`;
  } finally {
    await server.stop();
    await local.stop();
    await host.stop();
  }
}

const lines = [
  `GPU host over loopback, ${TOKENS} greedy tokens at batch 1, q4 on our kernels (host and object alike)`,
  '',
  '| where the object runs | model | hop per pass | tok/s through the host | tok/s on its own kernels |',
  '| --- | --- | ---: | ---: | ---: |',
];
for (const model of ['tiny', 'wordnet-chat']) lines.push(await nodeRuns(model, 'q4'));
if (!args['node-only']) for (const model of ['tiny', 'wordnet-chat']) lines.push(await workerdRun(model, 'q4'));
lines.push('', 'The protocol alone (a runner that computes nothing), Node, 250 passes:', '');
lines.push('| vocabulary | batch | round trip per pass, median | 10th percentile |', '| ---: | ---: | ---: | ---: |');
for (const [vocab, batch] of [
  [512, 1],
  [49152, 1],
  [49152, 16],
] as const) {
  const hop = await noOpHop(vocab, batch);
  lines.push(`| ${vocab} | ${batch} | ${fmt(hop.median)} ms | ${fmt(hop.p10)} ms |`);
}
lines.push(
  '',
  `load average while it ran: ${loadavg()
    .map((l) => l.toFixed(1))
    .join(', ')} on ${availableParallelism()} cores`,
);
console.log(lines.join('\n'));

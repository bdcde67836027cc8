// The edge figures: a model inside `wrangler dev` (real workerd), loaded from the local R2 bucket and from
// MODEL_URL (a static HTTP server), and the isolate's memory as the Workers limit counts it (JS heap,
// ArrayBuffers and WebAssembly memories, read through the inspector: scripts/lib/isolate-memory.ts) idle,
// with the model loaded, and under N concurrent streams.
//
//   tsx scripts/bench/edge-memory.ts [--model bench-135m] [--dtype q4] [--kv-dtype fp16] [--streams 16]
//     [--tokens 96] [--runs 3] [--sources r2,url] [--vocab 49152] [--shards 1,2,4] [--json out.json]
// --vocab serves the model with its tokenizer extended to that many tokens (full-vocab.ts: bench-135m's own
// stops at 5,868, SmolLM2's has 49,152). `npm run bench -- --sections edge-memory` runs it on bench-135m q4
// with a 49,152-token tokenizer. --shards runs each figure with SHARD_COUNT at each value, every shard loaded
// (prompts sent until each reports edge_infer_engine_loaded 1): wrangler dev puts them all in one isolate.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startDevServer, type DevServer } from '../lib/dev-server.js';
import { describeIsolateMemory, IsolateMemoryProbe, type IsolateMemory } from '../lib/isolate-memory.js';
import { sumMetric } from '../lib/prometheus-text.js';
import { startStaticServer } from '../lib/static-server.js';
import { uploadModel } from '../model-upload.js';
import { fullVocabFolder } from './full-vocab.js';
import { ensureBenchModels, modelDir } from './models.js';
import type { Variant } from './options.js';

export type ModelFrom = 'r2' | 'url';

export interface EdgeMemoryRun {
  from: ModelFrom;
  /** SHARD_COUNT, every shard loaded in the one isolate. */
  shards: number;
  /** What the isolate's budget counts (edge_infer_isolate_counted_bytes), once every shard is loaded. */
  countedBytes: number;
  /** What the first request waited for, and what the shard says the load took (edge_infer_model_load_seconds). */
  firstRequestSeconds: number;
  loadSeconds: number;
  idle?: IsolateMemory;
  loaded?: IsolateMemory;
  /** While `streams` streams run at once. */
  streaming?: IsolateMemory;
  /** After they ended. */
  after?: IsolateMemory;
  /** After one structured-output request (xgrammar's tokenizer tables and instances). */
  structured?: IsolateMemory;
  wasmMemoryMetric: number;
  /** Tokens every loaded shard's KV pool holds together (edge_infer_kv_pool_tokens: KV_CACHE_MB at KV_DTYPE). */
  poolTokens: number;
  /** Sequences preempted (recomputed later) for want of KV while the streams ran. */
  preemptions?: number;
}

export interface EdgeMemoryBench {
  model: string;
  /** Tokens in the served tokenizer. */
  vocab: number;
  dtype: string;
  kvDtype: string;
  streams: number;
  tokens: number;
  runs: EdgeMemoryRun[];
}

interface Options {
  model: Variant['model'];
  dtype: Variant['dtype'];
  kvDtype: string;
  streams: number;
  tokens: number;
  runs: number;
  sources: ModelFrom[];
  /** Extend the tokenizer to this many tokens (undefined: the model's own). */
  vocab?: number;
  shards: number[];
  json?: string;
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = {
    model: 'bench-135m',
    dtype: 'q4',
    kvDtype: 'fp16',
    streams: 16,
    tokens: 96,
    runs: 3,
    sources: ['r2', 'url'],
    shards: [1],
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--model') o.model = value as Options['model'];
    else if (flag === '--dtype') o.dtype = value as Options['dtype'];
    else if (flag === '--kv-dtype') o.kvDtype = value;
    else if (flag === '--streams') o.streams = Number(value);
    else if (flag === '--tokens') o.tokens = Number(value);
    else if (flag === '--runs') o.runs = Number(value);
    else if (flag === '--sources') o.sources = value.split(',') as ModelFrom[];
    else if (flag === '--vocab') o.vocab = Number(value);
    else if (flag === '--shards') o.shards = value.split(',').map(Number);
    else if (flag === '--json') o.json = value;
    else throw new Error(`unknown option ${flag}`);
  }
  return o;
}

const log = (s: string): void => console.error(`edge-memory: ${s}`);

const JSON_SCHEMA = {
  type: 'json_schema',
  json_schema: { name: 'point', schema: { type: 'object', properties: { x: { type: 'integer' } }, required: ['x'] } },
};

/** The largest sample of a gauge over its shards (a figure every shard of one isolate reports alike). */
function maxMetric(text: string, name: string): number {
  const values = text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .map((line) => Number(line.slice(line.lastIndexOf(' ') + 1)));
  return values.length ? Math.max(...values) : 0;
}

async function metrics(server: DevServer): Promise<string> {
  return (await fetch(`${server.url}/metrics`)).text();
}

async function completion(server: Pick<DevServer, 'url'>, body: Record<string, unknown>): Promise<Response> {
  const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`the server answered ${res.status}: ${await res.text()}`);
  return res;
}

/** `n` streams at once, resolved when each has read its whole body; `running` resolves once all are admitted. */
export function streams(server: Pick<DevServer, 'url'>, n: number, tokens: number): Promise<void>[] {
  return Array.from({ length: n }, async (_, i) => {
    const res = await completion(server, {
      prompt: `Stream ${i} of ${n}: a long story about the sea, the wind and a ship that never came home.`,
      max_tokens: tokens,
      temperature: 0.8,
      seed: i,
      ignore_eos: true,
      stream: true,
    });
    await res.arrayBuffer();
  });
}

export async function until(check: () => Promise<boolean>, what: string, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The folder served: the bench model's, or a copy with the tokenizer extended to `o.vocab` tokens. */
function servedFolder(o: Options): { folder: string; name: string } {
  if (!o.vocab) return { folder: modelDir(o.model), name: o.model };
  const name = `${o.model}-vocab${o.vocab}`;
  return { folder: fullVocabFolder(modelDir(o.model), join(modelDir(o.model), '..', name), o.vocab), name };
}

async function oneRun(o: Options, from: ModelFrom, measureMemory: boolean, shards: number): Promise<EdgeMemoryRun> {
  const persist = mkdtempSync(join(tmpdir(), 'edge-memory-'));
  const { folder, name } = servedFolder(o);
  const files = from === 'url' ? await startStaticServer(folder) : undefined;
  const vars: Record<string, string> = {
    MODEL: name,
    MODEL_DTYPE: o.dtype,
    SHARD_COUNT: String(shards),
    BACKEND: 'kernels',
    KV_DTYPE: o.kvDtype,
    MAX_BATCH: String(Math.max(16, o.streams)),
  };
  if (files) vars.MODEL_URL = files.url;
  else await uploadModel({ folder, name, dtype: o.dtype, remote: false, persistTo: persist });
  const server = await startDevServer(vars, persist);
  const probe = measureMemory ? await IsolateMemoryProbe.open(server) : undefined;
  try {
    const run: Partial<EdgeMemoryRun> = { from };
    run.idle = await probe?.measure();
    const t0 = performance.now();
    await (await completion(server, { prompt: 'Hi', max_tokens: 1 })).arrayBuffer();
    run.firstRequestSeconds = (performance.now() - t0) / 1000;
    // Prompts hash to shards by their prefix: distinct ones until every shard has loaded the model.
    for (let i = 0; sumMetric(await metrics(server), 'edge_infer_engine_loaded') < shards; i++) {
      if (i > 200) throw new Error(`only some of ${shards} shards loaded`);
      await (await completion(server, { prompt: `Load shard ${i}`, max_tokens: 1 })).arrayBuffer();
    }
    const text = await metrics(server);
    run.shards = shards;
    run.countedBytes = maxMetric(text, 'edge_infer_isolate_counted_bytes');
    run.loadSeconds = sumMetric(text, 'edge_infer_model_load_seconds');
    run.wasmMemoryMetric = sumMetric(text, 'edge_infer_wasm_memory_bytes');
    run.poolTokens = sumMetric(text, 'edge_infer_kv_pool_tokens');
    if (probe) {
      const preempted = sumMetric(text, 'edge_infer_preemptions_total');
      run.loaded = await probe.measure();
      const running = streams(server, o.streams, o.tokens);
      await until(async () => {
        // Running or waiting for a batch slot: where the pools are small, not all of them run at once.
        const text = await metrics(server);
        return sumMetric(text, 'edge_infer_running_requests') + sumMetric(text, 'edge_infer_queue_depth') >= o.streams;
      }, `${o.streams} streams to be admitted`);
      run.streaming = await probe.measure();
      await Promise.all(running);
      run.preemptions = sumMetric(await metrics(server), 'edge_infer_preemptions_total') - preempted;
      run.after = await probe.measure();
      await (
        await completion(server, { prompt: 'A JSON object:', max_tokens: 16, response_format: JSON_SCHEMA })
      ).arrayBuffer();
      run.structured = await probe.measure();
    }
    const phases = { idle: run.idle, loaded: run.loaded, streaming: run.streaming, structured: run.structured };
    for (const [label, m] of Object.entries(phases)) if (m) log(`${from}: ${label}: ${describeIsolateMemory(m)}`);
    log(`${from}, ${shards} shards: counted ${(run.countedBytes / 2 ** 20).toFixed(1)} MiB`);
    log(
      `${from}: KV pool ${run.poolTokens} tokens (${o.kvDtype}), ${run.preemptions ?? '-'} preemptions under the streams`,
    );
    log(`${from}: load ${run.loadSeconds.toFixed(2)} s (first request ${run.firstRequestSeconds.toFixed(2)} s)`);
    return run as EdgeMemoryRun;
  } finally {
    probe?.close();
    await server.stop();
    await files?.close();
    rmSync(persist, { recursive: true, force: true });
  }
}

export async function runEdgeMemory(o: Options): Promise<EdgeMemoryBench> {
  ensureBenchModels([{ model: o.model, dtype: o.dtype }]);
  const runs: EdgeMemoryRun[] = [];
  for (let r = 0; r < o.runs; r++)
    for (const shards of o.shards)
      for (const from of r % 2 ? [...o.sources].reverse() : o.sources)
        runs.push(await oneRun(o, from, r === 0, shards));
  const vocab = JSON.parse(readFileSync(join(servedFolder(o).folder, 'tokenizer.json'), 'utf8')) as {
    model: { vocab: Record<string, number> };
  };
  return {
    model: o.model,
    vocab: Object.keys(vocab.model.vocab).length,
    dtype: o.dtype,
    kvDtype: o.kvDtype,
    streams: o.streams,
    tokens: o.tokens,
    runs,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const o = parseArgs(process.argv.slice(2));
  const result = await runEdgeMemory(o);
  if (o.json) writeFileSync(o.json, JSON.stringify(result, null, 2));
  else console.log(JSON.stringify(result, null, 2));
}

// The edge as users meet it: bench-135m q4 on our kernels inside `wrangler dev` (workerd, the Durable Object,
// one shard, the model in the local R2 bucket, KV_DTYPE int8), over real HTTP with streaming clients, beside the
// same engine in this Node process (what `npm run generate` runs). Every ratio is taken run by run.
// The 8-bit pool because of the 16 streams: the 16 MiB that 128 MB left beside q4 weights held 45 blocks of
// fp16 KV, room for 7 streams of 96 tokens at once (the rest waited: batches of 7 and 9 took turns), and 85 of
// 8-bit KV, room for 14. The logits' scratch, computed 4 rows at a time since, left 3.9 MiB more: a 20 MiB pool
// of 8-bit KV (107 blocks) holds all 16 in the linear memory the 16 MiB one did (docs/kernels.md).
//   batch 1:   one stream of `long` tokens: decode tok/s and time to first token
//   streams:   `streams` concurrent streams of `short` tokens: aggregate tok/s
// Each run measures both twice: on an idle machine, then with the other core streaming memory.
//
//   tsx scripts/bench/edge.ts [--runs N] [--json FILE]   (npm run bench: section edge)
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Engine } from '../../src/engine/engine.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { edgeTable } from './edge-table.js';
import { type DevServer, startDevServer } from '../lib/dev-server.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { uploadModel } from '../model-upload.js';
import { promptIds } from './engine-runs.js';
import { ensureBenchModels, modelDir } from './models.js';
import { clients, inTurn, streamOnce } from './service.js';
import { startBusyCore } from './busy-core.js';
import { ratioByRun, Samples, sampled, type Sampled } from './stats.js';

export interface EdgeFigures {
  batch1: { service: Sampled; node: Sampled; ratio: Sampled; serviceTtftMs: Sampled; nodeTtftMs: Sampled };
  streams: { count: number; service: Sampled; node: Sampled; ratio: Sampled; serviceVsNodeBatch1: Sampled };
}

export interface EdgeBench extends EdgeFigures {
  model: string;
  settings: Record<string, string>;
  /** The same runs with the other core streaming memory (busy-core.ts), and the GB/s it read meanwhile. */
  busy?: EdgeFigures & { neighbourGBps: Sampled };
}

/** The worker's vars for the service (startEdgeServer; edge-ab.ts runs two such servers). */
const EDGE_SETTINGS = {
  MODEL: 'bench-135m',
  MODEL_DTYPE: 'q4',
  BACKEND: 'kernels',
  SHARD_COUNT: '1',
  KV_DTYPE: 'int8',
  KV_CACHE_MB: '20',
  MAX_BATCH: '16',
  KV_STORE_MB: '0',
};

/**
 * The service side: bench-135m q4 uploaded to a fresh local bucket and `wrangler dev` up with EDGE_SETTINGS;
 * `start` is another checkout's startDevServer where edge-ab.ts runs one (the models must exist: ensureBenchModels).
 */
export async function startEdgeServer(start: typeof startDevServer = startDevServer): Promise<DevServer> {
  const persist = mkdtempSync(join(tmpdir(), 'edge-bench-'));
  await uploadModel(
    { folder: modelDir('bench-135m'), name: 'bench-135m', dtype: 'q4', remote: false, persistTo: persist },
    () => {},
  );
  return start(EDGE_SETTINGS, persist, { readyWithinMs: 120_000 });
}

export async function runEdge(
  runs: number,
  log: (s: string) => void,
  long = 256,
  short = 64,
  streams = 16,
): Promise<EdgeBench> {
  ensureBenchModels([{ model: 'bench-135m', dtype: 'q4' }]);
  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('bench-135m')), {
    dtype: 'q4',
    kvDtype: 'int8',
    kvCacheBytes: Number(EDGE_SETTINGS.KV_CACHE_MB) * 2 ** 20,
    maxBatchSize: Number(EDGE_SETTINGS.MAX_BATCH),
  });
  const server = await startEdgeServer();
  const vocab = engine.samplableVocab;
  const viaNode = async (prompt: number[], tokens: number) => {
    const t0 = performance.now();
    let ttftMs = NaN;
    let completionTokens = 0;
    for await (const e of engine.generate({ prompt_ids: prompt, max_tokens: tokens, temperature: 0, ignore_eos: true }))
      if (e.type === 'token' && completionTokens++ === 0) ttftMs = performance.now() - t0;
    return { ttftMs, completionTokens };
  };
  const samples = new Samples();
  const busyCoreGBps: number[] = [];
  /**
   * Both sides of one run, their samples under `at` ('' idle, 'busy:'): the two batch-1 streams back to back, then
   * the two sides' streams, each pair in the run's order (alternating), so that a pair's figures are seconds apart
   * and this host's changes of speed (it moves between two) mostly fall between pairs, not inside one.
   */
  const measureRun = async (run: number, at: string) => {
    const seed = 500 + run;
    const sides = {
      service: {
        one: () => clients(1, () => streamOnce(server.url, promptIds(32, seed, 0, vocab), long)),
        many: () => clients(streams, (i) => streamOnce(server.url, promptIds(32, seed, i, vocab), short)),
      },
      node: {
        one: () => clients(1, () => viaNode(promptIds(32, seed + 1, 0, vocab), long)),
        many: () => clients(streams, (i) => viaNode(promptIds(32, seed + 1, i, vocab), short)),
      },
    };
    const order = run % 2 ? (['node', 'service'] as const) : (['service', 'node'] as const);
    const one = await inTurn(order, (side) => sides[side].one());
    const many = await inTurn(order, (side) => sides[side].many());
    if (run < 0) return;
    for (const side of ['service', 'node'] as const) {
      samples.add(`${at}${side}:1`, one[side].tokPerS);
      samples.add(`${at}${side}:ttft`, one[side].ttftMs);
      samples.add(`${at}${side}:n`, many[side].tokPerS);
    }
    const last = (k: string) => samples.get(`${at}${k}`).at(-1)!.toFixed(1);
    log(
      `edge: run ${run + 1}/${runs}${at ? ', other core busy' : ''}: batch 1 ${last('service:1')} tok/s over HTTP, ${last('node:1')} in Node; ` +
        `${streams} streams ${last('service:n')} (Node ${last('node:n')})`,
    );
  };
  const figures = (at: string): EdgeFigures => {
    const get = (k: string) => samples.get(`${at}${k}`);
    return {
      batch1: {
        service: sampled(get('service:1')),
        node: sampled(get('node:1')),
        ratio: ratioByRun(get('service:1'), get('node:1')),
        serviceTtftMs: sampled(get('service:ttft')),
        nodeTtftMs: sampled(get('node:ttft')),
      },
      streams: {
        count: streams,
        service: sampled(get('service:n')),
        node: sampled(get('node:n')),
        ratio: ratioByRun(get('service:n'), get('node:n')),
        serviceVsNodeBatch1: ratioByRun(get('service:n'), get('node:1')),
      },
    };
  };
  try {
    // Run -1 warms both up (V8 tiers the kernels up on first use; workerd loads the model on the first request).
    for (let run = -1; run < runs; run++) {
      await measureRun(run, '');
      if (run < 0) continue;
      const neighbour = await startBusyCore();
      try {
        await measureRun(run, 'busy:');
      } finally {
        busyCoreGBps.push(await neighbour.stop());
      }
    }
    return {
      model: 'bench-135m q4, kernels, KV int8',
      settings: EDGE_SETTINGS,
      ...figures(''),
      busy: { ...figures('busy:'), neighbourGBps: sampled(busyCoreGBps) },
    };
  } finally {
    await server.stop();
    await engine.runner.release();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { runs: { type: 'string', default: '3' }, json: { type: 'string' } } });
  const result = await runEdge(Number(values.runs), (s) => console.error(s));
  console.log(edgeTable(result));
  if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
}

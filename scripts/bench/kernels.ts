// The edge kernels against onnxruntime-web on bench-135m, one thread, side by side in one process:
// every figure is a median over runs, every comparison a ratio taken inside each run.
//   decode:   batch-1 decode steps/s: kernels fp32, int8, q4 against onnxruntime-web fp32 and onnxruntime-node
//             fp32 (its native CPU backend, two threads: what `--backend auto` would otherwise run)
//   batch 16: aggregate decode tok/s of 16 streams (kernels int8 and q4; onnxruntime-web fp32)
//             (both decode rows twice per run: on an idle machine, then with the other core streaming memory)
//   prefill:  512-token prompt tokens/s (kernels fp32 and int8; onnxruntime-web fp32)
//   session:  TTFT of a 20-token turn after 4096 cached tokens against a fresh 20-token prompt (kernels int8,
//             KV int8 with its integer attention, and the default float32 KV)
//   memory:   linear memory of a q4 engine with a 16 MiB KV pool (what a Durable Object would hold)
// Steps are runner passes (model only), so the comparison is of the forward passes themselves.
//
//   tsx scripts/bench/kernels.ts [--runs N] [--json FILE] [--quick]   (npm run bench: section kernels)
import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { ENGINE_DEFAULTS } from '../../src/engine/defaults.js';
import { Engine } from '../../src/engine/engine.js';
import type { KernelRunner } from '../../src/engine/runners/wasm/kernel-runner.js';
import type { PagedSequenceKv } from '../../src/engine/kv/paged-kv.js';
import type { KvDtype } from '../../src/engine/kv/kv-dtype.js';
import type { ModelDtype } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { ensureBenchModels, modelDir } from './models.js';
import { kernelsTable, type KernelsBench } from './kernels-table.js';
import { startBusyCore } from './busy-core.js';
import { ratioByRun, Samples, sampled } from './stats.js';

export type { KernelsBench } from './kernels-table.js';

const MODEL = 'bench-135m';

async function load(
  backend: 'kernels' | 'ort-wasm' | 'cpu',
  dtype: ModelDtype,
  kvMiB = 200,
  kvDtype: KvDtype = 'fp32',
): Promise<Engine> {
  return Engine.load(await nodeRuntime(backend), directorySource(modelDir(MODEL)), {
    dtype,
    autoRun: false,
    kvCacheBytes: kvMiB * 2 ** 20,
    maxTokensPerStep: 8192,
    kvDtype,
  });
}

const ids = (n: number, seed: number): number[] =>
  Array.from({ length: n }, (_, i) => 3 + ((i * 7919 + seed * 104729) % 40000));

/** Seconds of one pass of `rows`, reserving their room first. */
async function timed(engine: Engine, rows: { kv: PagedSequenceKv; tokens: number[] }[]): Promise<number> {
  for (const r of rows)
    if (!engine.kv.reserve(r.kv, r.tokens.length))
      throw new Error(`KV pool too small for the bench: ${JSON.stringify(engine.stats().kv)}`);
  const t0 = performance.now();
  await engine.runner.forward(rows);
  return (performance.now() - t0) / 1000;
}

/** Decode tokens/s of `batch` sequences after a 32-token prompt: `steps` one-token passes. */
async function decodeRate(engine: Engine, batch: number, steps: number): Promise<number> {
  const kvs = Array.from({ length: batch }, () => engine.kv.create());
  try {
    await timed(
      engine,
      kvs.map((kv, i) => ({ kv, tokens: ids(32, i) })),
    );
    let seconds = 0;
    for (let s = 0; s < steps; s++)
      seconds += await timed(
        engine,
        kvs.map((kv, i) => ({ kv, tokens: [3 + ((s * 31 + i) % 40000)] })),
      );
    return (batch * steps) / seconds;
  } finally {
    for (const kv of kvs) engine.kv.free(kv);
  }
}

async function prefillRate(engine: Engine, tokens: number): Promise<number> {
  const kv = engine.kv.create();
  try {
    return tokens / (await timed(engine, [{ kv, tokens: ids(tokens, 1) }]));
  } finally {
    engine.kv.free(kv);
  }
}

interface TurnTimes {
  cached: number[];
  fresh: number[];
}

/** A session of `history` cached tokens on `engine`, prefilled 512 tokens a pass. */
async function prefilledSession(engine: Engine, history: number): Promise<PagedSequenceKv> {
  const kv = engine.kv.create();
  for (let at = 0; at < history; at += 512)
    await timed(engine, [{ kv, tokens: ids(Math.min(512, history - at), 2 + at) }]);
  return kv;
}

/** One run: a 20-token turn over the session (then dropped again), and a fresh 20-token prompt. */
async function timeTurn(engine: Engine, kv: PagedSequenceKv, history: number, times: TurnTimes): Promise<void> {
  times.cached.push(await timed(engine, [{ kv, tokens: ids(20, 3) }]));
  engine.kv.truncate(kv, history);
  const fresh = engine.kv.create();
  times.fresh.push(await timed(engine, [{ kv: fresh, tokens: ids(20, 4) }]));
  engine.kv.free(fresh);
}

const sessionFigures = ({ cached, fresh }: TurnTimes) => ({
  cachedTurnS: sampled(cached),
  freshTurnS: sampled(fresh),
  ratio: ratioByRun(cached, fresh),
});

/** Batch-1 and 16-stream decode rates of one condition (idle, or the other core busy), one sample per run. */
class DecodeSamples {
  private readonly batch1 = new Samples();
  private readonly batch16 = new Samples();
  add(name: string, tokPerS: number): void {
    this.batch1.add(name, tokPerS);
  }
  add16(name: string, tokPerS: number): void {
    this.batch16.add(name, tokPerS);
  }
  figures(): Pick<KernelsBench, 'decode' | 'batch16'> {
    const one = (k: string) => this.batch1.get(k);
    const many = (k: string) => this.batch16.get(k);
    return {
      decode: Object.fromEntries(
        this.batch1.keys().map((k) => [
          k,
          {
            tokPerS: sampled(one(k)),
            vsOrtFp32: ratioByRun(one(k), one('ort-wasm fp32')),
            vsOrtNodeFp32: ratioByRun(one(k), one('ort-node fp32')),
          },
        ]),
      ),
      batch16: {
        kernelsInt8: sampled(many('kernels int8')),
        ortFp32: sampled(many('ort-wasm fp32')),
        vsOwnBatch1: ratioByRun(many('kernels int8'), one('kernels int8')),
        vsOrtFp32: ratioByRun(many('kernels int8'), many('ort-wasm fp32')),
        kernelsQ4: sampled(many('kernels q4')),
        q4VsOwnBatch1: ratioByRun(many('kernels q4'), one('kernels q4')),
      },
    };
  }
}

export async function benchKernels(runs: number, quick: boolean, log: (s: string) => void): Promise<KernelsBench> {
  ensureBenchModels((['fp32', 'int8', 'q4'] as const).map((dtype) => ({ model: MODEL, dtype })));
  const steps = quick ? 8 : 32;
  const ort = await load('ort-wasm', 'fp32');
  const ortNode = await load('cpu', 'fp32');
  const kernels = {
    fp32: await load('kernels', 'fp32'),
    int8: await load('kernels', 'int8'),
    q4: await load('kernels', 'q4'),
  };
  const idle = new DecodeSamples();
  const busy = new DecodeSamples();
  const busyCoreGBps: number[] = [];
  const prefill: Record<string, number[]> = { 'ort-wasm fp32': [], 'kernels fp32': [], 'kernels int8': [] };
  const decodeRows = async (into: DecodeSamples) => {
    into.add('ort-node fp32', await decodeRate(ortNode, 1, steps));
    into.add('ort-wasm fp32', await decodeRate(ort, 1, steps));
    for (const d of ['fp32', 'int8', 'q4'] as const) into.add(`kernels ${d}`, await decodeRate(kernels[d], 1, steps));
    into.add16('ort-wasm fp32', await decodeRate(ort, 16, steps / 4));
    into.add16('kernels int8', await decodeRate(kernels.int8, 16, steps / 4));
    into.add16('kernels q4', await decodeRate(kernels.q4, 16, steps / 4));
  };
  // Run 0 warms up and is not kept: V8 runs WebAssembly on its baseline compiler until the hot functions
  // are tiered up, which takes a few passes (the first engine measured would otherwise pay for it).
  for (let run = 0; run <= runs; run++) {
    log(run === 0 ? 'kernels bench: warm-up' : `kernels bench: run ${run}/${runs}`);
    if (run === 0) {
      for (const e of [ortNode, ort, ...Object.values(kernels)]) await decodeRate(e, 1, steps);
      await decodeRate(kernels.int8, 16, 2);
      await decodeRate(kernels.q4, 16, 2);
      continue;
    }
    await decodeRows(idle);
    // The same rows with the other core streaming memory (issue 48 asks for both conditions, run by run).
    const neighbour = await startBusyCore();
    try {
      await decodeRows(busy);
    } finally {
      busyCoreGBps.push(await neighbour.stop());
    }
    prefill['ort-wasm fp32'].push(await prefillRate(ort, 512));
    prefill['kernels fp32'].push(await prefillRate(kernels.fp32, 512));
    prefill['kernels int8'].push(await prefillRate(kernels.int8, 512));
  }
  await ort.runner.release();
  await ortNode.runner.release();

  // A session's next turn: 4096 tokens already cached (prefilled once), then a 20-token turn, timed to its
  // logits; the turn is dropped again (truncate) so every run sees the same 4096. Against a fresh 20-token
  // prompt; int8 weights, with the default float32 KV pool and with KV_DTYPE int8 (integer attention), run
  // by run side by side.
  const history = quick ? 1024 : 4096;
  const int8Kv = await load('kernels', 'int8', 200, 'int8');
  const sessions = [kernels.int8, int8Kv].map((engine) => ({ engine, times: { cached: [], fresh: [] } as TurnTimes }));
  log(`kernels bench: prefilling a ${history}-token session history, KV fp32 and int8`);
  const kvs = await Promise.all(sessions.map((s) => prefilledSession(s.engine, history)));
  for (let run = 0; run < runs; run++)
    for (const [i, s] of sessions.entries()) await timeTurn(s.engine, kvs[i], history, s.times);
  for (const [i, s] of sessions.entries()) s.engine.kv.free(kvs[i]);
  await int8Kv.runner.release();
  for (const e of Object.values(kernels)) await e.runner.release();

  // Footprint: a q4 engine as a Durable Object would hold it (KV_CACHE_MB=16, MAX_BATCH=16).
  const q4 = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir(MODEL)), {
    dtype: 'q4',
    autoRun: false,
    kvCacheBytes: 16 * 2 ** 20,
    maxBatchSize: 16,
  });
  const runner = q4.runner as KernelRunner;
  const kvQ4 = q4.kv.create();
  // Fill the pool, a step's budget (maxTokensPerStep) a pass: scratch at its largest pass and longest score rows.
  const fill = ids(q4.kv.pool.numBlocks * q4.kv.blockSize - 16, 5);
  for (let at = 0; at < fill.length; at += ENGINE_DEFAULTS.maxTokensPerStep)
    await timed(q4, [{ kv: kvQ4, tokens: fill.slice(at, at + ENGINE_DEFAULTS.maxTokensPerStep) }]);
  const memory = {
    linearMemoryBytes: runner.memoryBytes,
    weightBytes: runner.weights.bytes,
    kvBytes: q4.stats().kv.bytesTotal,
  };
  await q4.runner.release();

  const rate = (xs: number[]) => sampled(xs);
  return {
    runs,
    ...idle.figures(),
    busy: { ...busy.figures(), neighbourGBps: sampled(busyCoreGBps) },
    prefill512: Object.fromEntries(
      Object.entries(prefill).map(([k, v]) => [
        k,
        { tokPerS: rate(v), vsOrtFp32: ratioByRun(v, prefill['ort-wasm fp32']) },
      ]),
    ),
    session: { history, ...sessionFigures(sessions[1].times), fp32Kv: sessionFigures(sessions[0].times) },
    memory,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '5' },
      json: { type: 'string' },
      quick: { type: 'boolean', default: false },
    },
  });
  const out = await benchKernels(Number(values.runs), values.quick!, (s) => console.error(s));
  if (values.json) writeFileSync(values.json, JSON.stringify(out));
  console.log(kernelsTable(out));
}

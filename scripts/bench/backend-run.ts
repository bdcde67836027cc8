// One backend's half of the bench, in a process of its own (transformers.js binds to one ONNX runtime
// when first imported). Every variant is loaded at once so that each run measures all of them side by
// side; runs follow one warm-up, and each run rotates the order of the peers.
//
//   tsx scripts/bench/backend-run.ts <cpu|wasm> <out.json>   (options in BENCH_OPTIONS_JSON)
import { writeFileSync } from 'node:fs';
import { Engine } from '../../src/engine/engine.js';
import { kvBytesPerToken } from '../../src/engine/model/config.js';
import { loadModelFiles } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { createBareLoop, type BareLoop } from './bare-loop.js';
import { engineDecode, engineTtft, promptIds } from './engine-runs.js';
import { modelDir, onnxPath } from './models.js';
import { variantName, type Backend, type BenchOptions, type Variant } from './options.js';
import { measureStepPhases, type StepPhases } from './overhead.js';
import type { BackendResult, VariantResult } from './results.js';
import { createBandwidthMeter, decodeStepBytes, weightBytes } from './roofline.js';
import { openSessionHistory, type SessionHistory } from './sessions.js';
import { MemoryKvBlockStore } from '../../src/engine/kv/memory-block-store.js';
import { ratioByRun, sampled, Samples } from './stats.js';
import { createTransformersJsPeer, type TransformersJsPeer } from './transformers-js.js';

interface Loaded {
  v: Variant;
  engine: Engine;
  bare?: BareLoop;
  tjs?: TransformersJsPeer;
  sessions: Map<number, SessionHistory>;
  samples: Samples;
  phases: Map<number, StepPhases[]>;
  sameTokens: boolean;
}

export async function runBackend(backend: Backend, o: BenchOptions, log: (s: string) => void): Promise<BackendResult> {
  const started = performance.now();
  const has = (s: BenchOptions['sections'][number]): boolean => o.sections.includes(s);
  const runtime = await nodeRuntime(backend);
  const maxBatch = Math.max(32, ...o.batches);

  const loaded: Loaded[] = [];
  for (const v of o.variants) {
    const source = directorySource(modelDir(v.model));
    const big = v.model === 'bench-135m';
    // Room for the longest session history, its rebuilt twin and every other history at once.
    const kvCacheBytes = big ? 768 * 2 ** 20 : 64 * 2 ** 20;
    // Sessions are also restored from a block store in this process's memory (an object's SQLite in the
    // service). Half the pool holds every session's history; other requests' blocks are evicted first, so the
    // store stays small: gigabytes of blocks in this heap would slow every measurement, not just the restore.
    const kvStore = has('sessions') ? new MemoryKvBlockStore(kvCacheBytes / 2) : undefined;
    const engine = await Engine.load(runtime, source, {
      dtype: v.dtype,
      intraOpNumThreads: 1,
      kvCacheBytes,
      maxBatchSize: maxBatch,
      kvStore,
    });
    const item: Loaded = {
      v,
      engine,
      sessions: new Map(),
      samples: new Samples(),
      phases: new Map(),
      sameTokens: true,
    };
    if (has('peers')) {
      const files = await loadModelFiles(source, v.dtype);
      item.bare = await createBareLoop(runtime, files.onnx, files.config, engine.samplableVocab);
      item.tjs = await createTransformersJsPeer(backend, modelDir(v.model), v.dtype);
    }
    loaded.push(item);
    log(`${backend}: loaded ${variantName(v)}`);
  }
  const meter = has('roofline') ? createBandwidthMeter() : undefined;
  const bandwidth: number[] = [];

  const oneRun = async (run: number, measured: boolean): Promise<void> => {
    const seed = (run + 2) * 1_000;
    if (meter) bandwidth.push(meter.measure());
    for (const it of loaded) {
      const { engine, samples: s } = it;
      const add = (key: string, x: number): void => void (measured && s.add(key, x));
      if (has('decode') || has('peers')) {
        // Batch 1, the engine and its peers back to back, in an order that rotates run by run.
        const prompt = promptIds(o.promptTokens, seed, 99, engine.samplableVocab);
        const contenders: [string, () => Promise<number>][] = [
          [
            'engine',
            async () => {
              const r = await engineDecode(engine, 1, o.promptTokens, o.decodeTokens, seed);
              return r.aggregateTokPerS;
            },
          ],
        ];
        if (it.bare) {
          const bare = it.bare;
          contenders.push([
            'bare',
            async () => {
              const r = await bare.generate(prompt, o.decodeTokens);
              return r.decodeTokensPerS;
            },
          ]);
        }
        if (it.tjs) {
          const tjs = it.tjs;
          contenders.push(['tjs', async () => (await tjs.generate(prompt, o.decodeTokens)).decodeTokensPerS]);
        }
        for (let k = 0; k < contenders.length; k++) {
          const [name, f] = contenders[(k + run + 1) % contenders.length];
          add(name === 'engine' ? 'decode:1' : `peer:${name}`, await f());
        }
        if (it.bare && run === 0) {
          // Same tokens as the bare loop (greedy over the same logits): the engine adds no error.
          const stream = engine.generate({ prompt_ids: prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
          const ids: number[] = [];
          for await (const e of stream) if (e.type === 'token') ids.push(e.tokenId);
          const bare = (await it.bare.generate(prompt, 8)).ids;
          it.sameTokens = ids.join() === bare.join();
        }
      }
      if (has('decode')) {
        for (const b of o.batches.filter((b) => b > 1))
          add(
            `decode:${b}`,
            (await engineDecode(engine, b, o.promptTokens, o.decodeTokens, seed + b)).aggregateTokPerS,
          );
      }
      if (has('prefill')) {
        // The warm-up skips the longest prompts: one 512-token chunk warms what they run.
        const window = engine.config.maxPositionEmbeddings;
        for (const n of o.prefillLengths)
          if ((measured || n <= 512) && n < window) add(`ttft:${n}`, await engineTtft(engine, n, seed + n));
        add('ttft:fresh', await engineTtft(engine, o.freshPromptTokens, seed + 7));
      }
      const sessions =
        has('sessions') && o.sessionVariants.some((v) => v.model === it.v.model && v.dtype === it.v.dtype);
      if (sessions) {
        if (!has('prefill')) add('ttft:fresh', await engineTtft(engine, o.freshPromptTokens, seed + 7));
        // Histories the context window holds with every run's turn added (tiny's window is 2048).
        for (const h of o.histories.filter((h) => h + 32 * (o.runs + 2) <= engine.config.maxPositionEmbeddings)) {
          let session = it.sessions.get(h);
          if (!session) {
            session = await openSessionHistory(engine, h, `bench-${h}`);
            it.sessions.set(h, session);
          }
          add(`session:${h}:cached`, await session.cachedTurnTtftMs(run));
          // The warm-up opens the sessions (their history's prefill warms the same paths) but rebuilds nothing.
          if (measured) add(`session:${h}:rebuilt`, await session.rebuiltTtftMs(run));
          add(`session:${h}:restored`, await session.restoredTtftMs(run));
        }
      }
      if (has('overhead')) {
        for (const b of [1, 16]) {
          const p = await measureStepPhases(engine, b, o.promptTokens, o.decodeTokens, seed + 500 + b);
          if (measured) it.phases.set(b, [...(it.phases.get(b) ?? []), p]);
        }
      }
    }
  };

  await oneRun(-1, false);
  log(`${backend}: warm-up done (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  for (let run = 0; run < o.runs; run++) {
    await oneRun(run, true);
    const brief = loaded
      .map((it) => `${variantName(it.v)} ${it.samples.get('decode:1').at(-1)?.toFixed(1) ?? '-'} tok/s`)
      .join(', ');
    log(
      `${backend}: run ${run + 1}/${o.runs} (${((performance.now() - started) / 1000).toFixed(0)} s): batch 1 ${brief}`,
    );
  }

  const variants = loaded.map((it) => summarise(it, loaded, o, backend, bandwidth));
  for (const it of loaded) {
    for (const s of it.sessions.values()) s.release();
    await it.bare?.release();
    await it.tjs?.release();
    await it.engine.runner.release();
  }
  return {
    backend,
    ...(bandwidth.length ? { bandwidthGBps: sampled(bandwidth.map((b) => b / 1e9)) } : {}),
    variants,
    seconds: (performance.now() - started) / 1000,
  };
}

function summarise(it: Loaded, all: Loaded[], o: BenchOptions, backend: Backend, bandwidth: number[]): VariantResult {
  const s = it.samples;
  const cfg = it.engine.config;
  const weights = weightBytes(onnxPath(it.v));
  const kvPerToken = kvBytesPerToken(cfg);
  const r: VariantResult = {
    ...it.v,
    backend,
    weightBytes: weights,
    kvBytesPerToken: kvPerToken,
    decode: {},
    decodeVsBatch1: {},
    prefill: {},
  };
  const b1 = s.get('decode:1');
  for (const b of o.batches)
    if (s.has(`decode:${b}`)) {
      r.decode[b] = sampled(s.get(`decode:${b}`));
      if (b > 1) r.decodeVsBatch1[b] = ratioByRun(s.get(`decode:${b}`), b1);
    }
  const fp32 = all.find((x) => x.v.model === it.v.model && x.v.dtype === 'fp32');
  if (fp32 && it.v.dtype !== 'fp32' && b1.length) r.decodeVsFp32 = ratioByRun(b1, fp32.samples.get('decode:1'));
  for (const n of o.prefillLengths)
    if (s.has(`ttft:${n}`)) {
      const ms = s.get(`ttft:${n}`);
      r.prefill[n] = { tokPerS: sampled(ms.map((m) => (n * 1000) / m)), ttftMs: sampled(ms) };
    }
  if (s.has('ttft:fresh')) r.ttftFreshMs = sampled(s.get('ttft:fresh'));
  if (s.has('peer:bare')) {
    r.peers = {
      bareOrt: {
        decode: sampled(s.get('peer:bare')),
        engineRatio: ratioByRun(b1, s.get('peer:bare')),
        sameTokens: it.sameTokens,
      },
    };
    if (s.has('peer:tjs'))
      r.peers.transformersJs = { decode: sampled(s.get('peer:tjs')), engineRatio: ratioByRun(b1, s.get('peer:tjs')) };
  }
  if (bandwidth.length && b1.length) {
    // Mean context of a batch-1 decode measurement: the prompt plus half the generated tokens.
    const context = o.promptTokens + o.decodeTokens / 2;
    const bytes = decodeStepBytes(weights, kvPerToken, 1, context);
    const roof = bandwidth.slice(-b1.length).map((bw) => bw / bytes);
    r.roofline = {
      bytesPerToken: bytes,
      context,
      rooflineTokPerS: roof.reduce((a, b) => a + b, 0) / roof.length,
      fractionOfRoofline: ratioByRun(b1, roof),
    };
  }
  if (it.sessions.size) {
    r.sessions = {};
    const fresh = s.get('ttft:fresh');
    for (const [h, session] of it.sessions) {
      const cached = s.get(`session:${h}:cached`);
      const rebuilt = s.get(`session:${h}:rebuilt`);
      const restored = s.get(`session:${h}:restored`);
      r.sessions[h] = {
        historyTokens: session.historyTokens,
        cachedMs: sampled(cached),
        rebuiltMs: sampled(rebuilt),
        restoredMs: sampled(restored),
        cachedVsFresh: ratioByRun(cached, fresh),
        rebuiltVsCached: ratioByRun(rebuilt, cached),
        rebuiltVsRestored: ratioByRun(rebuilt, restored),
        restoredVsFresh: ratioByRun(restored, fresh),
      };
    }
  }
  if (it.phases.size) {
    r.overhead = {};
    for (const [b, runs] of it.phases) {
      const pick = (f: (p: StepPhases) => number): number => sampled(runs.map(f)).median;
      r.overhead[b] = {
        periodMs: pick((p) => p.periodMs),
        modelMs: pick((p) => p.modelMs),
        gatherScatterMs: pick((p) => p.gatherScatterMs),
        engineMs: pick((p) => p.engineMs),
        loopMs: pick((p) => p.loopMs),
        outsideShare: pick((p) => p.outsideShare),
        steps: pick((p) => p.steps),
        outsideShareRuns: runs.map((p) => p.outsideShare),
      };
    }
  }
  return r;
}

const isMain = process.argv[1]?.endsWith('backend-run.ts');
if (isMain) {
  const [backend, out] = process.argv.slice(2) as [Backend, string];
  const o = JSON.parse(process.env.BENCH_OPTIONS_JSON ?? '{}') as BenchOptions;
  const result = await runBackend(backend, o, (s) => console.error(s));
  writeFileSync(out, JSON.stringify(result));
  process.exit(0);
}

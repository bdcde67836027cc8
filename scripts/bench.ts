// Aggregate decode throughput of continuous batching: 1, 4, 16 and 32 concurrent sequences on the
// bench-135m model (SmolLM2-135M shapes, random weights), fp32 and int8, on onnxruntime-node (one
// intra-op thread, so the numbers measure batching, not threading). Each configuration runs several
// times, interleaved so that machine noise hits all of them alike; medians are reported.
//
//   npm run bench -- [--runs 3] [--tokens 32] [--prompt 32] [--concurrency 1,4,16,32] [--dtypes fp32,int8] [--backend cpu|wasm]
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Engine } from '../src/engine/engine.js';
import type { ModelDtype } from '../src/engine/model/model-files.js';
import { directorySource } from '../src/sources/directory-source.js';
import { makeModel } from './model-make.js';
import { nodeRuntime, type NodeBackend } from './lib/runtimes.js';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    tokens: { type: 'string', default: '32' },
    prompt: { type: 'string', default: '32' },
    concurrency: { type: 'string', default: '1,4,16,32' },
    dtypes: { type: 'string', default: 'fp32,int8' },
    backend: { type: 'string', default: 'cpu' },
  },
});
const runs = Number(args.runs);
const maxTokens = Number(args.tokens);
const promptLength = Number(args.prompt);
const levels = args.concurrency.split(',').map(Number);
const dtypes = args.dtypes.split(',') as ModelDtype[];

// Not under ./models: that folder is served as static assets, which cap files at 25 MiB.
const dir = fileURLToPath(new URL('../.bench/models/bench-135m', import.meta.url));
for (const dtype of dtypes) {
  const file = join(dir, 'onnx', dtype === 'fp32' ? 'model.onnx' : `model_${dtype}.onnx`);
  if (!existsSync(file)) {
    console.error(`generating bench-135m (${dtypes.join(', ')}) into ${dir} ...`);
    makeModel({ preset: 'bench-135m', outDir: dir, dtypes: dtypes.filter((d) => d !== 'fp32') as ('fp16' | 'int8' | 'q4')[] });
    break;
  }
}

/** Decode tokens per second over all sequences, measured from the step where every sequence has its first token. */
async function aggregateDecode(engine: Engine, concurrency: number, seed: number): Promise<number> {
  const streams = Array.from({ length: concurrency }, (_, i) => {
    const prompt = Array.from({ length: promptLength }, (_, j) => 3 + ((seed * 7919 + i * 104729 + j * 31) % 4000));
    return engine.generate({ prompt_ids: prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true });
  });
  const firsts = streams.map((s) => s.next());
  await Promise.all(firsts); // prefill done for all: every sequence has sampled its first token
  const t0 = performance.now();
  let tokens = 0;
  await Promise.all(
    streams.map(async (s) => {
      for await (const event of s) if (event.type === 'token') tokens++;
    }),
  );
  return (tokens * 1000) / (performance.now() - t0);
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const rows: string[] = [];
for (const dtype of dtypes) {
  const engine = await Engine.load(await nodeRuntime(args.backend as NodeBackend), directorySource(dir), {
    dtype,
    intraOpNumThreads: 1,
    kvCacheBytes: 512 * 2 ** 20,
    maxBatchSize: Math.max(...levels),
    maxTokensPerStep: Math.max(...levels) * promptLength,
  });
  await aggregateDecode(engine, 1, 0); // warm-up
  const samples = new Map<number, number[]>(levels.map((c) => [c, []]));
  for (let run = 0; run < runs; run++) {
    for (const c of levels) samples.get(c)!.push(await aggregateDecode(engine, c, run + 1));
    console.error(`${dtype} run ${run + 1}/${runs}: ${levels.map((c) => `${c}: ${samples.get(c)!.at(-1)!.toFixed(1)}`).join(', ')} tok/s`);
  }
  // Ratios are taken run by run (same run, side by side), then the median of those.
  const ratio = (c: number): number => median(samples.get(c)!.map((v, i) => v / samples.get(1)![i]));
  for (const c of levels) {
    rows.push(`| ${dtype} | ${c} | ${median(samples.get(c)!).toFixed(1)} | ${c === 1 ? '1.00' : ratio(c).toFixed(2)}× |`);
  }
  await engine.runner.release();
}

console.log(`\nbench-135m, ${args.backend} backend, one thread, prompt ${promptLength} tokens, ${maxTokens} generated per sequence, median of ${runs} runs\n`);
console.log('| weights | concurrent sequences | aggregate decode tok/s | vs 1 sequence |');
console.log('|---|---|---|---|');
for (const row of rows) console.log(row);

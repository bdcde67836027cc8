// The gpu section: one command for a real GPU's figures (issue 43 item 4). It generates its own models
// (bench-135m's shapes; bench-1b's q4 with --big), needs no network, and prints side by side our WGSL pass
// (q4, int8, fp16), onnxruntime-web's WebGPU path (fp32, the GpuRunner the engine picks) and our WASM
// kernels (q4, one thread): aggregate decode tokens/s at each batch, a 512-token prefill, and the WGSL
// pass's dispatches per step. Without a hardware adapter it says so: on lavapipe (or any fallback adapter)
// the rows are labelled "lavapipe, correctness only", never GPU figures; with no adapter at all only the
// kernels run. The GPU host over HTTP from wrangler dev is not measured here (scripts/bench/gpu-host.ts).
//
//   node --import tsx scripts/bench/gpu.ts [--quick] [--big] [--runs 2] [--batches 1,16,64] [--prefill 512]
//     [--tokens 16] [--json FILE]
// Exported as runGpuBench() for scripts/bench.ts (--sections gpu).
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { webGpuRuntimeForNode } from '../../src/backends/ort-webgpu-node.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerationRequest } from '../../src/engine/request.js';
import type { WgslRunner } from '../../src/engine/runners/webgpu/pass/wgsl-runner.js';
import type { EngineRuntime } from '../../src/engine/model/runtime.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { answerHelp } from '../lib/help.js';
import { probeGpuAdapter } from '../lib/gpu-probe.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { ensureBenchModels, modelDir } from './models.js';
import type { Variant } from './options.js';
import { median } from './stats.js';

export interface GpuBenchOptions {
  runs: number;
  batches: number[];
  prefill: number;
  tokens: number;
  /** Adds bench-1b (Llama-3.2-1B's shapes) in q4: a minute or two to generate. */
  big: boolean;
}

export interface GpuBenchRow {
  path: string;
  model: string;
  /** Median aggregate decode tokens/s by batch. */
  decode: Record<string, number>;
  prefillTokensPerS: number;
  /** Dispatches in one step's compute pass (WGSL pass only). */
  dispatches?: number;
}

export interface GpuBench {
  adapter: string;
  /** 'hardware' figures count; 'software' ones are lavapipe's, correctness only; 'none' ran the kernels only. */
  kind: 'hardware' | 'software' | 'none';
  label: string;
  rows: GpuBenchRow[];
}

export const GPU_BENCH_DEFAULTS: GpuBenchOptions = {
  runs: 2,
  batches: [1, 16, 64],
  prefill: 512,
  tokens: 16,
  big: false,
};
/** A short run for checking the section works (and for lavapipe, where only correctness counts). */
export const GPU_BENCH_QUICK: GpuBenchOptions = { runs: 1, batches: [1, 4], prefill: 32, tokens: 4, big: false };

/** The section's flags: --quick picks the short run, and explicit flags win over it. */
export function parseGpuBenchArgs(argv: readonly string[]): GpuBenchOptions & { json?: string } {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      quick: { type: 'boolean', default: false },
      big: { type: 'boolean', default: false },
      runs: { type: 'string' },
      batches: { type: 'string' },
      prefill: { type: 'string' },
      tokens: { type: 'string' },
      json: { type: 'string' },
    },
    strict: true,
  });
  const base = values.quick ? GPU_BENCH_QUICK : GPU_BENCH_DEFAULTS;
  const count = (name: string, v: string | undefined, d: number): number => {
    if (v === undefined) return d;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, not ${v}`);
    return n;
  };
  return {
    runs: count('runs', values.runs, base.runs),
    batches: values.batches ? values.batches.split(',').map((b) => count('batches', b, 1)) : base.batches,
    prefill: count('prefill', values.prefill, base.prefill),
    tokens: count('tokens', values.tokens, base.tokens),
    big: values.big ?? false,
    json: values.json,
  };
}

const ids = (n: number, seed: number) => Array.from({ length: n }, (_, i) => 3 + ((seed * 31 + i * 13) % 500));

/** Aggregate decode tokens/s of `batch` concurrent greedy requests: from the last first token to the last token. */
async function decodeRate(engine: Engine, batch: number, tokens: number, seed: number): Promise<number> {
  const firsts: number[] = [];
  const ends: number[] = [];
  await Promise.all(
    Array.from({ length: batch }, async (_, b) => {
      const request: GenerationRequest = {
        prompt_ids: ids(16, seed + b),
        max_tokens: tokens + 1,
        temperature: 0,
        ignore_eos: true,
      };
      let first = true;
      for await (const e of engine.generate(request)) {
        if (e.type !== 'token') continue;
        if (first) firsts.push(performance.now());
        first = false;
        ends.push(performance.now());
      }
    }),
  );
  return (batch * tokens) / ((Math.max(...ends) - Math.max(...firsts)) / 1000);
}

async function prefillRate(engine: Engine, length: number, seed: number): Promise<number> {
  const t0 = performance.now();
  for await (const e of engine.generate({ prompt_ids: ids(length, seed), max_tokens: 1, temperature: 0 }))
    if (e.type === 'done') break;
  return length / ((performance.now() - t0) / 1000);
}

async function measure(path: string, model: string, engine: Engine, o: GpuBenchOptions, log: (s: string) => void) {
  await decodeRate(engine, 1, 2, 99); // warm-up: shader compiles, first allocations
  const decode: Record<string, number> = {};
  for (const batch of o.batches) {
    const runs: number[] = [];
    for (let r = 0; r < o.runs; r++) runs.push(await decodeRate(engine, batch, o.tokens, r));
    decode[batch] = median(runs);
    log(`gpu bench: ${path} ${model} batch ${batch}: ${decode[batch].toFixed(1)} tok/s`);
  }
  const pre: number[] = [];
  for (let r = 0; r < o.runs; r++) pre.push(await prefillRate(engine, o.prefill, r));
  const dispatches = (engine.runner as Partial<WgslRunner>).lastDispatches;
  return { path, model, decode, prefillTokensPerS: median(pre), dispatches: dispatches || undefined };
}

export async function runGpuBench(o: GpuBenchOptions, log: (s: string) => void = console.error): Promise<GpuBench> {
  const variants: Variant[] = [
    { model: 'bench-135m', dtype: 'fp32' },
    { model: 'bench-135m', dtype: 'fp16' },
    { model: 'bench-135m', dtype: 'int8' },
    { model: 'bench-135m', dtype: 'q4' },
    ...(o.big ? [{ model: 'bench-1b', dtype: 'q4' } as Variant] : []),
  ];
  ensureBenchModels(variants);
  const probe = probeGpuAdapter();
  const label =
    probe.kind === 'hardware'
      ? `GPU: ${probe.description}`
      : probe.kind === 'software'
        ? `lavapipe, correctness only (${probe.description}): not GPU figures`
        : 'no WebGPU adapter: GPU paths skipped, kernels only';
  log(`gpu bench: ${label}`);
  // What the runs hold at once (16-token prompts, or the one prefill) at bench-1b's fp32 KV bytes per token
  // (16 layers x K and V x 8 heads x 64 x 4 B), the largest of the models; bench-135m's is a third of that.
  const kvTokens = Math.max(Math.max(...o.batches) * (16 + o.tokens + 2), o.prefill + 2) + 256;
  const kvCacheBytes = kvTokens * 16 * 2 * 8 * 64 * 4;
  const limits = { kvCacheBytes, maxBatchSize: Math.max(...o.batches) };
  const rows: GpuBenchRow[] = [];
  const run = async (path: string, runtime: EngineRuntime, v: Variant) => {
    const engine = await Engine.load(runtime, directorySource(modelDir(v.model)), { ...limits, dtype: v.dtype });
    try {
      rows.push(await measure(path, `${v.model} ${v.dtype}`, engine, o, log));
    } finally {
      await engine.runner.release();
    }
  };
  if (probe.kind !== 'none') {
    const gpu = await webGpuRuntimeForNode();
    for (const v of variants.filter((v) => v.dtype !== 'fp32'))
      await run('WGSL pass', { ...gpu, runner: 'kernels' } as EngineRuntime, v);
    await run('onnxruntime-web WebGPU', gpu, { model: 'bench-135m', dtype: 'fp32' });
  }
  const kernels = await nodeRuntime('kernels');
  for (const v of variants.filter((v) => v.dtype === 'q4' || v.dtype === 'int8')) await run('WASM kernels', kernels, v);
  return { adapter: probe.description, kind: probe.kind, label, rows };
}

export function gpuBenchTable(b: GpuBench, batches: readonly number[], prefill: number): string {
  const head = `| path | model | ${batches.map((n) => `batch ${n}`).join(' | ')} | prefill ${prefill} | dispatches/step |`;
  const sep = `| --- | --- | ${batches.map(() => '---:').join(' | ')} | ---: | ---: |`;
  const lines = b.rows.map(
    (r) =>
      `| ${r.path} | ${r.model} | ${batches.map((n) => (r.decode[n] ?? 0).toFixed(1)).join(' | ')} | ${r.prefillTokensPerS.toFixed(0)} | ${r.dispatches ?? '-'} |`,
  );
  return [`**${b.label}** (aggregate decode tokens/s; prefill tokens/s)`, '', head, sep, ...lines].join('\n');
}

export const GPU_BENCH_HELP = `Usage: node --import tsx scripts/bench/gpu.ts [--quick] [--big] [--runs 2] [--batches 1,16,64] [--prefill 512] [--tokens 16] [--json FILE]
Our WGSL pass (q4, int8, fp16), onnxruntime-web's WebGPU path (fp32) and our WASM kernels side by side on
bench-135m (--big adds bench-1b q4): decode at each batch, a prefill, dispatches per step. On lavapipe the rows
are labelled "correctness only"; without an adapter only the kernels run. Models are generated, no network.`;

if (import.meta.url === `file://${process.argv[1]}`) {
  answerHelp(GPU_BENCH_HELP);
  const o = parseGpuBenchArgs(process.argv.slice(2));
  const bench = await runGpuBench(o);
  if (o.json) writeFileSync(o.json, `${JSON.stringify(bench, null, 1)}\n`);
  console.log(gpuBenchTable(bench, o.batches, o.prefill));
  process.exit(0);
}

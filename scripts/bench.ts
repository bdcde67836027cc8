// `npm run bench`: the engine's speed on bench-135m (SmolLM2-135M's shapes, random weights; fp32, int8,
// q4) and tiny, on onnxruntime-node (`cpu`) and onnxruntime-web (`wasm`), one thread: decode at 1-32
// concurrent sequences, prefill, time to first token, the bandwidth roofline, session continuation, the
// step's overhead, peers (a bare onnxruntime loop, transformers.js, llama.cpp's WebAssembly build) and the
// service over HTTP.
// Writes <out>/results.json, <out>/decode.svg and prints Markdown tables. Not part of `npm test`.
//
//   npm run bench -- [--quick] [--models bench-135m:fp32,bench-135m:int8,bench-135m:q4,tiny:fp32]
//     [--backends cpu,wasm] [--sections decode,prefill,peers,roofline,sessions,overhead,service,speculative,webgpu,wllama,kernels,restore,structured,embeddings,edge,edge-memory,stages,architectures,gpu]
//     [--runs 5] [--batches 1,4,16,32] [--prefill 128,512,2048] [--histories 256,1024,4096]
//     [--prompt 32] [--tokens 32] [--fresh 20] [--clients 1,16] [--session-models ...] [--out bench] [--append]
// Each flag can also be given as BENCH_<NAME> (BENCH_QUICK=1). Each backend runs in a child process.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureBenchModels } from './bench/models.js';
import { machineInfo } from './bench/machine.js';
import { type Backend, parseBenchOptions, SECTIONS } from './bench/options.js';
import { markdownReport } from './bench/report.js';
import type { BackendResult, BenchResults } from './bench/results.js';
import { runService } from './bench/service.js';
import { runResponsesChain } from './bench/responses-chain.js';
import { runServiceRestore } from './bench/service-restore.js';
import type { SpeculationCase } from './bench/speculative-table.js';
import type { WebGpuBenchRow } from './bench/webgpu-table.js';
import type { WllamaBenchRow } from './bench/wllama-table.js';
import type { ArchitectureBenchRow } from './bench/architectures-table.js';
import type { KernelsBench } from './bench/kernels-table.js';
import type { EdgeBench } from './bench/edge.js';
import type { EdgeMemoryBench } from './bench/edge-memory.js';
import type { StagesBench } from './bench/stages.js';
import type { StructuredBench } from './bench/structured.js';
import type { EmbeddingsBench } from './bench/embeddings.js';
import { type LoraBench, loraTable } from './bench/lora.js';
import { type GpuBench, gpuBenchTable, parseGpuBenchArgs } from './bench/gpu.js';
import { decodePlotSvg } from './bench/svg-plot.js';
import { answerHelp } from './lib/help.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const log = (s: string): void => console.error(s);
answerHelp(`Usage: npm run bench -- [--quick] [--models bench-135m:fp32,bench-135m:int8,bench-135m:q4,tiny:fp32]
    [--backends cpu,wasm] [--sections ${SECTIONS.join(',')}]
    [--runs 5] [--batches 1,4,16,32] [--prefill 128,512,2048] [--histories 256,1024,4096]
    [--prompt 32] [--tokens 32] [--fresh 20] [--clients 1,16] [--session-models ...] [--out bench] [--append]
Measures the engine (decode, prefill, peers, the service over HTTP...) and writes <out>/results.json,
<out>/decode.svg and Markdown tables. Each flag can also be given as BENCH_<NAME> (BENCH_QUICK=1).
--quick: a few minutes' run for checking a change.`);
const options = parseBenchOptions(process.argv.slice(2));
// The wllama, kernels, stages, architectures, lora, gpu and embeddings sections make the models they need themselves.
const SELF_MADE: readonly string[] = ['wllama', 'kernels', 'stages', 'architectures', 'lora', 'gpu', 'embeddings'];
if (options.sections.some((s) => !SELF_MADE.includes(s))) ensureBenchModels(options.variants);
const outDir = resolvePath(ROOT, options.out);
mkdirSync(outDir, { recursive: true });

function runBackendChild(backend: string): Promise<BackendResult> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-infer-bench-'));
  const file = join(dir, `${backend}.json`);
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', join(ROOT, 'scripts/bench/backend-run.ts'), backend, file],
      {
        cwd: ROOT,
        env: { ...process.env, BENCH_OPTIONS_JSON: JSON.stringify(options) },
        stdio: ['ignore', 'inherit', 'inherit'],
      },
    );
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`${backend} bench exited with ${code}`));
      const result = JSON.parse(readFileSync(file, 'utf8')) as BackendResult;
      rmSync(dir, { recursive: true, force: true });
      resolve(result);
    });
  });
}

/** A section that runs as a script of its own (its own ONNX runtime, or Node flags), returning its --json output. */
function runScriptChild<T>(nodeFlags: string[], script: string, args: string[]): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-infer-bench-'));
  const file = join(dir, 'out.json');
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [...nodeFlags, '--import', 'tsx', join(ROOT, script), ...args, '--json', file],
      { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] },
    );
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`${script} exited with ${code}`));
      const out = JSON.parse(readFileSync(file, 'utf8')) as T;
      rmSync(dir, { recursive: true, force: true });
      resolve(out);
    });
  });
}

const SCRIPT_SECTIONS: readonly string[] = [
  'service',
  'responses',
  'speculative',
  'webgpu',
  'wllama',
  'kernels',
  'restore',
  'structured',
  'embeddings',
  'edge',
  'edge-memory',
  'stages',
  'architectures',
  'gpu',
];
const engineSections = options.sections.filter((s) => !SCRIPT_SECTIONS.includes(s));
const backends: BackendResult[] = [];
if (engineSections.length) for (const b of options.backends) backends.push(await runBackendChild(b));
const results: BenchResults = { machine: machineInfo(), options, backends };
if (options.sections.includes('service'))
  results.service = await runService(options.clients, options.runs, options.decodeTokens, options.promptTokens, log);
// Histories tiny's 2,048-token window holds with a turn added.
if (options.sections.includes('restore'))
  results.serviceRestore = await runServiceRestore(
    options.histories.filter((h) => h <= 1024),
    options.runs,
    log,
  );
if (options.sections.includes('responses')) results.responsesChain = await runResponsesChain(options.runs, log);
if (options.sections.includes('speculative')) {
  // onnxruntime-node (cpu) and the edge kernels (wasm runs Llama graphs on them), each where asked for.
  const speculate = (backend: Backend) =>
    runScriptChild<SpeculationCase[]>([], 'scripts/bench/speculative.ts', [
      backend,
      '--runs',
      String(options.runs),
      '--tokens',
      '128',
    ]);
  if (options.backends.includes('cpu')) results.speculative = await speculate('cpu');
  if (options.backends.includes('wasm')) results.speculativeKernels = await speculate('wasm');
}
if (options.sections.includes('webgpu')) {
  // --liftoff-only: otherwise V8 spends ~30 s optimising ORT's WebGPU wasm (docs/platform.md).
  results.webgpu = await runScriptChild<WebGpuBenchRow[]>(['--liftoff-only'], 'scripts/bench/webgpu.ts', [
    '--runs',
    String(Math.min(options.runs, 3)),
    '--batches',
    '1,4',
  ]);
}
if (options.sections.includes('kernels')) {
  results.kernels = await runScriptChild<KernelsBench>([], 'scripts/bench/kernels.ts', [
    '--runs',
    String(options.runs),
  ]);
}
if (options.sections.includes('structured')) {
  // A step at 16 constrained streams against 16 free ones, and grammar compile times (edge kernels).
  results.structured = await runScriptChild<StructuredBench>([], 'scripts/bench/structured.ts', [
    'kernels',
    '--runs',
    String(options.runs),
  ]);
}
if (options.sections.includes('embeddings')) {
  // Vectors per second at batch 1 and 32 (edge kernels, one thread), 32-token inputs: bench-135m beside transformers.js
  // and onnxruntime-web at fp32, and Qwen3-Embedding-0.6B's shapes (GGUF Q8_0, as it is published).
  results.embeddings = [];
  for (const [model, dtype] of [
    ['bench-135m', 'fp32'],
    ['bench-135m', 'q4'],
    ['bench-qwen3-0.6b', 'Q8_0'],
  ])
    results.embeddings.push(
      await runScriptChild<EmbeddingsBench>([], 'scripts/bench/embeddings.ts', [
        '--model',
        model,
        '--dtype',
        dtype,
        '--runs',
        String(options.runs),
      ]),
    );
}
if (options.sections.includes('edge'))
  results.edge = await runScriptChild<EdgeBench>([], 'scripts/bench/edge.ts', ['--runs', String(options.runs)]);
if (options.sections.includes('edge-memory'))
  // bench-135m with SmolLM2's vocabulary size, so the isolate holds what a real 135M model's would.
  results.edgeMemory = await runScriptChild<EdgeMemoryBench>([], 'scripts/bench/edge-memory.ts', [
    '--runs',
    String(Math.min(options.runs, 3)),
    '--vocab',
    '49152',
    '--shards',
    '1,2,4',
  ]);
if (options.sections.includes('stages'))
  // bench-360m on 3 stages, bench-135m's 16 x 1,024 tokens resident on 4, bench-1b on as many as 128 MiB each needs.
  results.stages = await runScriptChild<StagesBench>([], 'scripts/bench/stages.ts', ['--runs', String(options.runs)]);
if (options.sections.includes('architectures'))
  // Qwen2.5-0.5B's, Qwen3-0.6B's and Gemma-3-270M's shapes as GGUF, the kernels against llama.cpp.
  results.architectures = await runScriptChild<ArchitectureBenchRow[]>([], 'scripts/bench/architectures.ts', [
    '--runs',
    String(options.runs),
  ]);
if (options.sections.includes('lora')) {
  // Adapter rows against base rows on bench-135m q4 and int8, batch 1 and 16 across 4 adapters; memory per adapter.
  results.lora = await runScriptChild<LoraBench>([], 'scripts/bench/lora.ts', ['--runs', String(options.runs)]);
  console.log(`\n${loraTable(results.lora)}\n`);
}
if (options.sections.includes('gpu')) {
  // WGSL pass, onnxruntime-web's WebGPU path and the kernels side by side (lavapipe's rows labelled as such).
  const quick = process.argv.includes('--quick') || process.env.BENCH_QUICK === '1';
  const gpuArgs = quick ? ['--quick'] : [];
  results.gpu = await runScriptChild<GpuBench>([], 'scripts/bench/gpu.ts', gpuArgs);
  const o = parseGpuBenchArgs(gpuArgs);
  console.log(`\n${gpuBenchTable(results.gpu, o.batches, o.prefill)}\n`);
}
if (options.sections.includes('wllama')) {
  // Batch-1 greedy decode of 128 tokens, as the speculative section measures ours.
  results.wllama = await runScriptChild<WllamaBenchRow[]>([], 'scripts/bench/wllama.ts', [
    '--runs',
    String(options.runs),
    '--tokens',
    '128',
  ]);
}
if (options.append && existsSync(join(outDir, 'results.json'))) {
  // A long run split in parts (one backend each): earlier parts' backends and service are kept.
  const earlier = JSON.parse(readFileSync(join(outDir, 'results.json'), 'utf8')) as BenchResults;
  results.backends = [...earlier.backends.filter((b) => !backends.some((n) => n.backend === b.backend)), ...backends];
  results.service ??= earlier.service;
  results.serviceRestore ??= earlier.serviceRestore;
  results.responsesChain ??= earlier.responsesChain;
  results.speculative ??= earlier.speculative;
  results.speculativeKernels ??= earlier.speculativeKernels;
  results.webgpu ??= earlier.webgpu;
  results.wllama ??= earlier.wllama;
  results.kernels ??= earlier.kernels;
  results.structured ??= earlier.structured;
  results.embeddings ??= earlier.embeddings;
  results.edge ??= earlier.edge;
  results.edgeMemory ??= earlier.edgeMemory;
  results.stages ??= earlier.stages;
  results.architectures ??= earlier.architectures;
  results.lora ??= earlier.lora;
  results.gpu ??= earlier.gpu;
  results.parts = [
    ...(earlier.parts ?? [{ machine: earlier.machine, options: earlier.options }]),
    { machine: results.machine, options },
  ];
  // A part that ran no engine section leaves the tables to the options they were measured with.
  if (engineSections.length === 0) [results.machine, results.options] = [earlier.machine, earlier.options];
}

writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(results, null, 1)}\n`);
const svg = decodePlotSvg(
  results.backends,
  'bench-135m: aggregate decode tokens/s, one thread (solid cpu, dashed wasm)',
);
writeFileSync(join(outDir, 'decode.svg'), svg);
console.log(`\n${markdownReport(results)}`);
log(`wrote ${join(options.out, 'results.json')} and ${join(options.out, 'decode.svg')}`);

// Pipeline stages (PIPELINE_STAGES=N) in `wrangler dev`: the head (InferenceObject: tokenizer, scheduler, block
// tables, embedding and output projection) and N stage Workers, all in one `wrangler dev` process (one workerd,
// one thread; each Worker script its own isolate), the model from MODEL_URL (modelServer). Every isolate's memory is
// read as the Workers limit counts it (JS heap + ArrayBuffers + WebAssembly memories): the head's through
// wrangler's inspector, each stage's through workerd's own (wrangler's lists only the first config's isolate).
//
//   pipeline: bench-360m q4 on 3 stages: every isolate loaded and under 8 streams; greedy text and logprobs
//             against the one-process Node engine on the same folder; batch-1 decode tok/s over HTTP against
//             the Node engine and against the same model in one workerd isolate (its budget lifted), run by run.
//   resident: bench-135m q4 on 4 stages, KV fp16, KV_CACHE_MB sized for 16 prompts of 1,024 tokens: all 16
//             prefilled, then each asked again with 8 tokens more: its cached tokens, the pool's capacity and
//             each isolate's memory while all are resident.
//   1b:       bench-1b q4 (Llama-3.2-1B's shapes) on the fewest stages of at most 128 MiB each, the head too:
//             every isolate's memory, tokens equal to Node's, batch-1 tok/s. Its 128k x 2048 embedding (8-bit,
//             281 MiB) fits no isolate, so its rows are split over the stages (PIPELINE_VOCAB=stages).
//   gemma3:   Gemma-3-270M's shapes as a Q4_0 GGUF file (the architectures section's, its real 262k tokenizer)
//             on the fewest stages of at most 128 MiB, its table's rows on the stages: as pipeline, 8 streams.
//   processes: bench-360m q4 on 3 stages, 16 streams at once, each stage in a wrangler dev process of its own
//             against all in one (stage-processes.ts).
//
//   tsx scripts/bench/stages.ts [--cases pipeline,resident,1b,gemma3,processes] [--runs 3] [--json FILE]   (npm run bench: section stages)
import { appendFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Engine } from '../../src/engine/engine.js';
import { parseModelConfig, kvBytesPerToken } from '../../src/engine/model/config.js';
import { onnxFileFor } from '../../src/engine/model/model-files.js';
import { planStages } from '../../src/engine/runners/stages/stage-plan.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { startDevServer, type DevServer } from '../lib/dev-server.js';
import {
  describeIsolateMemory,
  IsolateMemoryProbe,
  workerdTargets,
  type IsolateMemory,
} from '../lib/isolate-memory.js';
import { sumMetric } from '../lib/prometheus-text.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { stageScriptName, withVars, writePipelineConfigs } from '../lib/stage-configs.js';
import { startStaticServer, type StaticServer } from '../lib/static-server.js';
import { ensureFolder } from './architectures.js';
import { promptIds } from './engine-runs.js';
import { streams, until } from './edge-memory.js';
import { ensureBenchModels, modelDir } from './models.js';
import type { Variant } from './options.js';
import { streamOnce } from './service.js';
import { runProcessesCase, type ProcessesCaseResult } from './stage-processes.js';
import { ratioByRun, sampled, Samples, type Sampled } from './stats.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MiB = 2 ** 20;
const BLOCK_SIZE = 16;
export const STAGE_CASES = ['pipeline', 'resident', '1b', 'gemma3', 'processes'] as const;
export type StageCase = (typeof STAGE_CASES)[number];

const log = (s: string): void => console.error(`stages: ${s}`);

export interface IsolateRow {
  /** `head`, or `stage i`. */
  name: string;
  /** The stage's layers [from, to); the head holds the ends. */
  layers?: [number, number];
  /** What the isolate's budget counts (the stage's isolate_bytes on /v1/models; the head's edge_infer_isolate_counted_bytes). */
  countedBytes?: number;
  loaded?: IsolateMemory;
  streaming?: IsolateMemory;
  /** resident: once every prompt's blocks are in the pool. */
  resident?: IsolateMemory;
}

export interface PipelineCaseResult {
  model: string;
  dtype: string;
  stages: number;
  settings: Record<string, string>;
  /** The head's MEMORY_BUDGET_MB (the stages keep 128). */
  headBudgetMb: number;
  weightsFileBytes: number;
  /** What the first request waited for (every stage loads its layers). */
  firstRequestSeconds: number;
  isolates: IsolateRow[];
  streams: number;
  /** Greedy completions over HTTP against the one-process Node engine, batched on both sides. */
  equal: { prompts: number; tokens: number; sameText: number; sameLogprobs: number; maxLogprobDiff: number };
  /** Decode tokens/s of one stream (after its first token), over HTTP and in Node, ratios run by run. */
  batch1: {
    tokens: number;
    staged: Sampled;
    node: Sampled;
    oneIsolate?: Sampled;
    stagedVsNode: Sampled;
    stagedVsOneIsolate?: Sampled;
    stagedTtftMs: Sampled;
    nodeTtftMs: Sampled;
  };
  /** Why the one-isolate comparison is missing, where it is. */
  oneIsolateError?: string;
}

export interface ResidentCaseResult {
  model: string;
  dtype: string;
  stages: number;
  settings: Record<string, string>;
  sessions: number;
  tokensEach: number;
  /** The pool (edge_infer_kv_blocks_total x block size): tokens it holds over every stage. */
  poolTokens: number;
  poolBlocks: number;
  /** Each stage's part of the pool (edge_infer_stage_kv_pool_bytes), by stage. */
  stageKvBytes: number[];
  /** Prefill of the 16 prompts, one after another: tokens/s. */
  prefillTokPerS: number;
  /** Blocks cached and idle once all were prefilled. */
  idleBlocks: number;
  /** Each prompt's cached tokens when asked again with 8 tokens more (all resident: 1,024 each). */
  cachedTokens: number[];
  isolates: IsolateRow[];
}

export interface StagesBench {
  runs: number;
  pipeline?: PipelineCaseResult;
  resident?: ResidentCaseResult;
  big?: PipelineCaseResult;
  /** Gemma-3-270M's shapes (Q4_0 GGUF, its 262k-row table split over the stages). */
  gemma3?: PipelineCaseResult;
  processes?: ProcessesCaseResult;
}

/** A pipeline in one `wrangler dev`: the server and one memory probe per isolate. */
interface Pipeline {
  server: DevServer;
  head: IsolateMemoryProbe;
  stages: IsolateMemoryProbe[];
  firstRequestSeconds: number;
  closeProbes(): void;
  close(): Promise<void>;
}

async function completion(url: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', body: JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) throw new Error(`the server answered ${res.status}: ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

async function metrics(server: DevServer): Promise<string> {
  return (await fetch(`${server.url}/metrics`)).text();
}

/** One labelled sample per stage (`stage="i"`), in stage order. */
function stageMetric(text: string, name: string): number[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && l.includes('stage="'))
    .map((l) => [Number(/stage="(\d+)"/.exec(l)![1]), Number(l.slice(l.lastIndexOf(' ') + 1))])
    .sort((a, b) => a[0] - b[0])
    .map(([, v]) => v);
}

/**
 * The model folder over HTTP, with ranged reads, as MODEL_URL (set in `vars`): every stage reads only its own
 * layers. Not the local R2 bucket (model:upload): wrangler dev's R2 is a JS worker of miniflare's that pipes each
 * object through a TransformStream, and with several stages reading bench-1b's 862 MiB file (a multipart object)
 * workerd grew past 4.8 GB and spent its time in V8's full collections (external-memory pressure, every new
 * chunk), not answering the first request within 5 minutes; over MODEL_URL the same load takes ~9 s.
 */
async function modelServer(folder: string, vars: Record<string, string>): Promise<StaticServer> {
  const files = await startStaticServer(folder, { ranges: true });
  vars.MODEL_URL = files.url;
  return files;
}

/**
 * Starts head + `stages` stage Workers in one `wrangler dev` (their objects' storage in `persist`), the model read
 * from MODEL_URL (`o.vars`), sends the first request (every stage loads) and opens a probe on every isolate.
 */
async function startPipeline(o: {
  model: string;
  dtype: string;
  stages: number;
  vars: Record<string, string>;
  headBudgetMb: number;
  persist: string;
  tag: string;
}): Promise<Pipeline> {
  const toml = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8');
  const base = /^name = "([^"]+)"/m.exec(toml)![1];
  // Every var in the files, none on the command line: the head's budget is its own, each stage keeps 128 MiB.
  const vars = { MODEL: o.model, MODEL_DTYPE: o.dtype, MEMORY_BUDGET_MB: '128', ...o.vars };
  const files = writePipelineConfigs(
    ROOT,
    withVars(toml, { ...vars, MEMORY_BUDGET_MB: String(o.headBudgetMb) }),
    o.stages,
    vars,
    o.tag,
  );
  const removeFiles = () => {
    for (const f of files) rmSync(join(ROOT, f), { force: true });
  };
  let server: DevServer | undefined;
  const probes: IsolateMemoryProbe[] = [];
  try {
    // BENCH_STAGES_LOG=<file>: wrangler dev's whole output, as it comes (the error path keeps only its end).
    const logFile = process.env.BENCH_STAGES_LOG;
    const onLine = logFile
      ? (line: string) => appendFileSync(logFile, `${new Date().toISOString()} ${line}\n`)
      : undefined;
    server = await startDevServer({}, o.persist, { configs: files, readyWithinMs: 120_000, onLine });
    const url = server.url;
    const t0 = performance.now();
    await completion(url, { prompt: 'Hi', max_tokens: 1, temperature: 0 });
    const firstRequestSeconds = (performance.now() - t0) / 1000;
    const head = await IsolateMemoryProbe.open(server);
    probes.push(head);
    const targets = await workerdTargets();
    // A stage isolate runs the inspector's task only with work: a one-token request passes through every stage.
    const wake = async () => void (await completion(url, { prompt: 'Hi', max_tokens: 1, temperature: 0 }));
    const stages: IsolateMemoryProbe[] = [];
    for (let i = 1; i <= o.stages; i++) {
      const id = `core:user:${stageScriptName(base, i, o.tag)}`;
      const target = targets.find((t) => t.id === id);
      if (!target)
        throw new Error(`workerd's inspector lists no ${id} (it lists ${targets.map((t) => t.id).join(', ')})`);
      const probe = await IsolateMemoryProbe.openTarget(target.webSocketDebuggerUrl, wake);
      probes.push(probe);
      stages.push(probe);
    }
    const running = server;
    return {
      server,
      head,
      stages,
      firstRequestSeconds,
      closeProbes: () => {
        for (const p of probes) p.close();
      },
      close: async () => {
        for (const p of probes) p.close();
        await running.stop();
        removeFiles();
      },
    };
  } catch (err) {
    for (const p of probes) p.close();
    await server?.stop();
    removeFiles();
    throw err;
  }
}

/** Every isolate measured, head first. */
async function measureAll(p: Pipeline): Promise<IsolateMemory[]> {
  const out = [await p.head.measure()];
  for (const s of p.stages) out.push(await s.measure());
  return out;
}

/** What the head counts, and each stage's layers and counted bytes (/v1/models). */
async function isolateRows(p: Pipeline): Promise<IsolateRow[]> {
  const models = (await (await fetch(`${p.server.url}/v1/models`)).json()) as {
    data: { stages: { layers: [number, number]; isolate_bytes: number | null }[] | null }[];
  };
  const stages = models.data[0].stages ?? [];
  const text = await metrics(p.server);
  const counted = text
    .split('\n')
    .filter((l) => l.startsWith('edge_infer_isolate_counted_bytes'))
    .map((l) => Number(l.slice(l.lastIndexOf(' ') + 1)));
  const headCounted = counted.length ? Math.max(...counted) : undefined;
  return [
    { name: 'head', countedBytes: headCounted },
    ...stages.map((s, i) => ({ name: `stage ${i + 1}`, layers: s.layers, countedBytes: s.isolate_bytes ?? undefined })),
  ];
}

interface Timed {
  ttftMs: number;
  /** Tokens after the first ÷ the time from the first to the last. */
  decodeTokPerS: number;
}

/** One greedy stream over HTTP, timed by the chunks' arrival (service.ts's streamOnce). */
async function streamTimed(url: string, prompt: number[], tokens: number): Promise<Timed> {
  const { ttftMs, lastMs } = await streamOnce(url, prompt, tokens);
  return { ttftMs, decodeTokPerS: ((tokens - 1) * 1000) / (lastMs - ttftMs) };
}

async function nodeTimed(engine: Engine, prompt: number[], tokens: number): Promise<Timed> {
  const t0 = performance.now();
  let first = NaN;
  let last = NaN;
  let count = 0;
  for await (const e of engine.generate({ prompt_ids: prompt, max_tokens: tokens, temperature: 0, ignore_eos: true }))
    if (e.type === 'token') {
      last = performance.now();
      if (count++ === 0) first = last;
    }
  return { ttftMs: first - t0, decodeTokPerS: ((count - 1) * 1000) / (last - first) };
}

const EQUAL_PROMPTS = [
  'Once upon a time',
  'The sea was calm and the boats were out',
  'A dog and a cat',
  'In the beginning the old man said',
];

/** The prompts' greedy completions over HTTP (all at once: one batch) against the Node engine's. */
async function compareWithNode(url: string, engine: Engine, tokens: number): Promise<PipelineCaseResult['equal']> {
  const request = { max_tokens: tokens, temperature: 0, ignore_eos: true };
  const served = await Promise.all(
    EQUAL_PROMPTS.map(async (prompt) => {
      const body = (await completion(url, { ...request, prompt, logprobs: 0 })) as {
        choices: { text: string; logprobs: { token_logprobs: number[] } }[];
      };
      return { text: body.choices[0].text, logprobs: body.choices[0].logprobs.token_logprobs };
    }),
  );
  const local = await Promise.all(
    EQUAL_PROMPTS.map(async (prompt) => {
      const logprobs: number[] = [];
      let text = '';
      for await (const e of engine.generate({ ...request, prompt, logprobs: true, top_logprobs: 0 })) {
        if (e.type === 'token') logprobs.push(e.logprob ?? NaN);
        else text = e.text;
      }
      return { text, logprobs };
    }),
  );
  let maxLogprobDiff = 0;
  let sameLogprobs = 0;
  for (const [i, s] of served.entries()) {
    const diffs = s.logprobs.map((v, t) => Math.abs(v - local[i].logprobs[t]));
    maxLogprobDiff = Math.max(maxLogprobDiff, ...diffs);
    if (s.logprobs.length === local[i].logprobs.length && diffs.every((d) => d === 0)) sameLogprobs++;
  }
  const sameText = served.filter((s, i) => s.text === local[i].text).length;
  for (const [i, s] of served.entries())
    if (s.text !== local[i].text)
      log(`differs: ${JSON.stringify(s.text)} over HTTP, ${JSON.stringify(local[i].text)} in Node`);
  return { prompts: EQUAL_PROMPTS.length, tokens, sameText, sameLogprobs, maxLogprobDiff };
}

/** The most layers any of `n` stages holds. */
function largestSpan(n: number, layers: number): number {
  return Math.max(...planStages(n, new Array<number>(layers).fill(1)).map((s) => s.to - s.from));
}

/** A weights file and what its embedding costs a weight (GGUF Q4_0 blocks, or a q4 ONNX file's 8-bit table). */
interface WeightsFile {
  file: string;
  embeddingBytesPerWeight: number;
}

/** A q4 ONNX file is its 4-bit layers and its 8-bit embedding (blocks of 32 with a float32 scale each). */
const Q4_ONNX: WeightsFile = { file: onnxFileFor('q4'), embeddingBytesPerWeight: 1 + 4 / 32 };
/** A Q4_0 GGUF file (gguf-writer.ts): every matrix, the embedding too, in blocks of 32 nibbles and a half scale. */
const Q4_0_GGUF: WeightsFile = { file: 'model.gguf', embeddingBytesPerWeight: 18 / 32 };

/**
 * The fewest stages of a model whose largest (its layers' weights, its share of `kvBytes`, and `overhead`: code,
 * JS heap, scratch) fits `budget`: the layers' bytes are the file's less the embedding's. With `vocabOnStages`
 * (PIPELINE_VOCAB=stages) each stage also holds an even share of the embedding's rows.
 */
export function stagesToFit(
  folder: string,
  kvBytes: number,
  budget: number,
  overhead: number,
  vocabOnStages = false,
  weights: WeightsFile = Q4_ONNX,
): number {
  const config = parseModelConfig(JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')), {});
  const embedding =
    config.vocabSize * config.hiddenSize * weights.embeddingBytesPerWeight * (config.tieWordEmbeddings ? 1 : 2);
  const fileBytes = statSync(join(folder, weights.file)).size;
  const perLayer = (fileBytes - embedding + kvBytes) / config.numLayers;
  if (perLayer + (vocabOnStages ? embedding / config.numLayers : 0) > budget - overhead)
    throw new Error('one layer a stage does not fit the budget');
  for (let n = 1; ; n++) {
    const largest = largestSpan(n, config.numLayers) * perLayer + (vocabOnStages ? embedding / n : 0);
    if (largest <= budget - overhead) return n;
  }
}

async function runPipelineCase(
  o: {
    /** A q4 bench model (generated here), or with `folder` the name a GGUF folder is served under. */
    model: Variant['model'] | string;
    /** A Q4_0 GGUF folder (the architectures section's) instead of a generated q4 ONNX model. */
    folder?: string;
    stages: number | 'fit';
    streams: number;
    /** Tokens of the batch-1 stream, and of each equality completion. */
    long: number;
    equalTokens: number;
    headBudgetMb: number;
    /** PIPELINE_VOCAB: where the embedding and output projection live. */
    vocab: 'head' | 'stages';
  },
  runs: number,
): Promise<PipelineCaseResult> {
  const dtype = o.folder ? ('gguf' as const) : ('q4' as const);
  const weights = o.folder ? Q4_0_GGUF : Q4_ONNX;
  const bench = o.model as Variant['model'];
  if (!o.folder) ensureBenchModels([{ model: bench, dtype: 'q4' }]);
  const folder = o.folder ?? modelDir(bench);
  const settings: Record<string, string> = {
    BACKEND: 'kernels',
    SHARD_COUNT: '1',
    KV_DTYPE: 'fp16',
    KV_CACHE_MB: '16',
    MAX_BATCH: '16',
    KV_STORE_MB: '0',
    PIPELINE_VOCAB: o.vocab,
  };
  const weightsFileBytes = statSync(join(folder, weights.file)).size;
  const config = parseModelConfig(JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')), {});
  // A stage's isolate besides its layers and KV share (code, JS heap, scratch): bench-360m's took 9-11 MiB.
  let stages =
    o.stages === 'fit'
      ? stagesToFit(folder, Number(settings.KV_CACHE_MB) * MiB, 128 * MiB, 12 * MiB, o.vocab === 'stages', weights)
      : o.stages;
  const persist = mkdtempSync(join(tmpdir(), 'stages-bench-'));
  const onePersist = mkdtempSync(join(tmpdir(), 'stages-bench-one-'));
  const files = await modelServer(folder, settings);
  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(folder), {
    dtype,
    kvDtype: 'fp16',
    kvCacheBytes: 16 * MiB,
    maxBatchSize: 16,
  });
  let pipeline: Pipeline | undefined;
  let one: DevServer | undefined;
  try {
    for (;;) {
      try {
        log(`${o.model} ${dtype} on ${stages} stages: starting wrangler dev`);
        pipeline = await startPipeline({
          model: o.model,
          dtype,
          stages,
          vars: settings,
          headBudgetMb: o.headBudgetMb,
          persist,
          tag: `bench${process.pid}s${stages}`,
        });
        break;
      } catch (err) {
        // A stage past its budget refuses to load, naming its terms: one stage more.
        if (o.stages !== 'fit' || !/model_too_large|cannot be served/.test(String(err))) throw err;
        log(`${stages} stages do not fit: ${String(err).slice(0, 600)}`);
        // The next count that takes a layer off the largest stage.
        const largest = largestSpan(stages, config.numLayers);
        while (largestSpan(stages, config.numLayers) >= largest) stages++;
      }
    }
    const p = pipeline;
    log(`loaded in ${p.firstRequestSeconds.toFixed(1)} s`);
    const isolates = await isolateRows(p);
    const loaded = await measureAll(p);
    for (const [i, m] of loaded.entries()) {
      isolates[i].loaded = m;
      log(`${isolates[i].name} loaded: ${describeIsolateMemory(m)}`);
    }
    if (o.streams > 0) {
      const running = streams(p.server, o.streams, 96);
      await until(async () => {
        const text = await metrics(p.server);
        return sumMetric(text, 'edge_infer_running_requests') >= o.streams;
      }, `${o.streams} streams to run`);
      const streaming = await measureAll(p);
      await Promise.all(running);
      for (const [i, m] of streaming.entries()) {
        isolates[i].streaming = m;
        log(`${isolates[i].name} under ${o.streams} streams: ${describeIsolateMemory(m)}`);
      }
    }
    // Done with the inspectors: a DevTools session on the head turns on workerd's Network events, which
    // wrangler's proxy forwards one request each; the timings run without any.
    p.closeProbes();
    const equal = await compareWithNode(p.server.url, engine, o.equalTokens);
    log(`greedy against Node: ${equal.sameText}/${equal.prompts} texts equal, max |Δ logprob| ${equal.maxLogprobDiff}`);

    // The same model in one workerd isolate, its budget lifted: what the stages cost beside workerd itself.
    let oneIsolateError: string | undefined;
    try {
      // Its own storage: the head is a script of the same name, and two workerd processes must not share its SQLite.
      one = await startDevServer(
        { MODEL: o.model, MODEL_DTYPE: dtype, ...settings, MEMORY_BUDGET_MB: '4096' },
        onePersist,
        { readyWithinMs: 120_000 },
      );
      await completion(one.url, { prompt: 'Hi', max_tokens: 1, temperature: 0 });
    } catch (err) {
      oneIsolateError = String(err).slice(0, 300);
      log(`one isolate: ${oneIsolateError}`);
      await one?.stop();
      one = undefined;
    }

    const vocab = engine.samplableVocab;
    const samples = new Samples();
    for (let run = -1; run < runs; run++) {
      const prompt = promptIds(32, 700 + run, 0, vocab);
      const sides: [string, () => Promise<Timed>][] = [
        ['staged', () => streamTimed(p.server.url, prompt, o.long)],
        ['node', () => nodeTimed(engine, prompt, o.long)],
      ];
      const oneUrl = one?.url;
      if (oneUrl) sides.push(['one', () => streamTimed(oneUrl, prompt, o.long)]);
      // The order turns run by run.
      const order = sides.map((_, i) => sides[(i + Math.max(run, 0)) % sides.length]);
      for (const [side, f] of order) {
        const t = await f();
        if (run < 0) continue;
        samples.add(side, t.decodeTokPerS);
        samples.add(`${side}:ttft`, t.ttftMs);
      }
      if (run >= 0)
        log(
          `run ${run + 1}/${runs}: batch 1 ${samples.get('staged').at(-1)!.toFixed(1)} tok/s over stages, ` +
            `${samples.get('node').at(-1)!.toFixed(1)} in Node${one ? `, ${samples.get('one').at(-1)!.toFixed(1)} in one isolate` : ''}`,
        );
    }
    return {
      model: o.model,
      dtype,
      stages,
      settings,
      headBudgetMb: o.headBudgetMb,
      weightsFileBytes,
      firstRequestSeconds: p.firstRequestSeconds,
      isolates,
      streams: o.streams,
      equal,
      batch1: {
        tokens: o.long,
        staged: sampled(samples.get('staged')),
        node: sampled(samples.get('node')),
        stagedVsNode: ratioByRun(samples.get('staged'), samples.get('node')),
        stagedTtftMs: sampled(samples.get('staged:ttft')),
        nodeTtftMs: sampled(samples.get('node:ttft')),
        ...(one
          ? {
              oneIsolate: sampled(samples.get('one')),
              stagedVsOneIsolate: ratioByRun(samples.get('staged'), samples.get('one')),
            }
          : {}),
      },
      ...(oneIsolateError ? { oneIsolateError } : {}),
    };
  } catch (err) {
    if (pipeline) log(`wrangler dev's last output:\n${pipeline.server.log().slice(-4000)}`);
    throw err;
  } finally {
    await pipeline?.close();
    await one?.stop();
    await engine.runner.release();
    await files.close();
    rmSync(persist, { recursive: true, force: true });
    rmSync(onePersist, { recursive: true, force: true });
  }
}

async function runResidentCase(sessions: number, tokensEach: number, stages: number): Promise<ResidentCaseResult> {
  const model = 'bench-135m';
  const dtype = 'q4' as const;
  ensureBenchModels([{ model, dtype }]);
  const folder = modelDir(model);
  const config = parseModelConfig(JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')), {});
  const blockBytes = BLOCK_SIZE * kvBytesPerToken(config, 'fp16');
  // Every prompt's blocks, and one spare block each for the turn asked after them.
  const blocks = sessions * (Math.ceil(tokensEach / BLOCK_SIZE) + 1);
  const settings: Record<string, string> = {
    BACKEND: 'kernels',
    SHARD_COUNT: '1',
    KV_DTYPE: 'fp16',
    KV_CACHE_MB: String(Math.ceil((blocks * blockBytes) / MiB)),
    MAX_BATCH: '16',
    KV_STORE_MB: '0',
  };
  const persist = mkdtempSync(join(tmpdir(), 'stages-bench-'));
  const files = await modelServer(folder, settings);
  log(`${model} ${dtype} on ${stages} stages, KV_CACHE_MB ${settings.KV_CACHE_MB}: starting wrangler dev`);
  const p = await startPipeline({
    model,
    dtype,
    stages,
    vars: settings,
    headBudgetMb: 128,
    persist,
    tag: `bench${process.pid}r`,
  });
  try {
    const tokenizer = JSON.parse(readFileSync(join(folder, 'tokenizer.json'), 'utf8')) as {
      model: { vocab: Record<string, number> };
    };
    const vocab = Math.min(config.vocabSize, Object.keys(tokenizer.model.vocab).length);
    const prompts = Array.from({ length: sessions }, (_, i) => promptIds(tokensEach, 900, i, vocab));
    const t0 = performance.now();
    for (const prompt of prompts) await completion(p.server.url, { prompt, max_tokens: 1, temperature: 0 });
    const prefillTokPerS = (sessions * tokensEach * 1000) / (performance.now() - t0);
    log(`prefilled ${sessions} x ${tokensEach} tokens at ${prefillTokPerS.toFixed(0)} tok/s`);
    const text = await metrics(p.server);
    const poolBlocks = sumMetric(text, 'edge_infer_kv_blocks_total');
    const blockSize = sumMetric(text, 'edge_infer_kv_block_size_tokens') || BLOCK_SIZE;
    const idleBlocks = sumMetric(text, 'edge_infer_kv_blocks_cached_idle');
    const stageKvBytes = stageMetric(text, 'edge_infer_stage_kv_pool_bytes');
    const isolates = await isolateRows(p);
    // The probes' wake requests ("Hi", one token) take a block or two of their own, past the spares.
    const resident = await measureAll(p);
    for (const [i, m] of resident.entries()) {
      isolates[i].resident = m;
      log(`${isolates[i].name} with every prompt resident: ${describeIsolateMemory(m)}`);
    }
    const cachedTokens: number[] = [];
    for (const [i, prompt] of prompts.entries()) {
      const turn = promptIds(8, 901, i, vocab);
      const body = (await completion(p.server.url, {
        prompt: [...prompt, ...turn],
        max_tokens: 1,
        temperature: 0,
      })) as {
        usage: { prompt_tokens_details?: { cached_tokens?: number } };
      };
      cachedTokens.push(body.usage.prompt_tokens_details?.cached_tokens ?? 0);
    }
    log(`cached tokens when asked again: ${cachedTokens.join(', ')}`);
    return {
      model,
      dtype,
      stages,
      settings,
      sessions,
      tokensEach,
      poolTokens: poolBlocks * blockSize,
      poolBlocks,
      stageKvBytes,
      prefillTokPerS,
      idleBlocks,
      cachedTokens,
      isolates,
    };
  } catch (err) {
    log(`wrangler dev's last output:\n${p.server.log().slice(-4000)}`);
    throw err;
  } finally {
    await p.close();
    await files.close();
    rmSync(persist, { recursive: true, force: true });
  }
}

export async function runStages(cases: readonly StageCase[], runs: number): Promise<StagesBench> {
  const out: StagesBench = { runs };
  if (cases.includes('pipeline'))
    out.pipeline = await runPipelineCase(
      { model: 'bench-360m', stages: 3, streams: 8, long: 128, equalTokens: 32, headBudgetMb: 128, vocab: 'head' },
      runs,
    );
  if (cases.includes('resident')) out.resident = await runResidentCase(16, 1024, 4);
  if (cases.includes('1b'))
    out.big = await runPipelineCase(
      // Its 128k x 2048 embedding (8-bit, 281 MiB) fits no head: its rows are split over the stages.
      { model: 'bench-1b', stages: 'fit', streams: 8, long: 48, equalTokens: 16, headBudgetMb: 128, vocab: 'stages' },
      runs,
    );
  if (cases.includes('gemma3')) {
    // Gemma-3-270M's shapes as a Q4_0 GGUF file (the architectures section's): its 262k x 640 table is 90 MiB at
    // 4 bits, which with the real 262k-entry tokenizer leaves no head room for it: its rows go to the stages.
    const folder = await ensureFolder('bench-gemma3-270m', 'Q4_0', log);
    out.gemma3 = await runPipelineCase(
      {
        model: basename(folder),
        folder,
        stages: 'fit',
        streams: 8,
        long: 64,
        equalTokens: 16,
        headBudgetMb: 128,
        vocab: 'stages',
      },
      runs,
    );
  }
  if (cases.includes('processes')) out.processes = await runProcessesCase(runs);
  return out;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '3' },
      cases: { type: 'string', default: STAGE_CASES.join(',') },
      json: { type: 'string' },
    },
  });
  const cases = values.cases.split(',') as StageCase[];
  for (const c of cases) if (!STAGE_CASES.includes(c)) throw new Error(`unknown case ${c} (${STAGE_CASES.join(', ')})`);
  const result = await runStages(cases, Number(values.runs));
  if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
  else console.log(JSON.stringify(result, null, 2));
}

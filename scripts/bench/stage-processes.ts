// The stages section's `processes` case: pipeline stages each in a `wrangler dev` process of its own (the dev
// registry connects them, as `npm start -- --stage-processes` runs them) against all of them in one process,
// 16 concurrent streams each. In one process every isolate shares workerd's one thread, so passes go through
// the stages one after another; in processes of their own the stages compute at once, on as many cores as the
// machine has. Every layout (LAYOUTS) is up side by side and measured run by run in turn.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { availableParallelism } from 'node:os';
import { startDevServer, type DevServer } from '../lib/dev-server.js';
import { inFlightArgs } from '../start-args.js';
import { startStaticServer } from '../lib/static-server.js';
import { withVars, writePipelineConfigs } from '../lib/stage-configs.js';
import { streams } from './edge-memory.js';
import { ensureBenchModels, modelDir } from './models.js';
import { ratioByRun, sampled, Samples, type Sampled } from './stats.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const log = (s: string): void => console.error(`stages (processes): ${s}`);

/** One way of running the head and its stages: in one process or each in its own, and the pipeline's settings. */
export interface LayoutSpec {
  name: string;
  /** Each stage in a `wrangler dev` process of its own (else head and stages in one). */
  apart: boolean;
  /** What it sets besides the case's settings (PIPELINE_IN_FLIGHT, PIPELINE_MICROBATCHES). */
  vars: Record<string, string>;
}

/** What `npm start` sets where PIPELINE_IN_FLIGHT is not given (inFlightArgs), as vars. */
function startDefault(stages: number, apart: boolean): Record<string, string> {
  const [, spec] = inFlightArgs({ PIPELINE_STAGES: String(stages) }, apart, availableParallelism());
  return { PIPELINE_IN_FLIGHT: spec.split(':')[1] };
}

/**
 * The layouts measured, in turn within each run: as `npm start` runs them (one process: one pass in flight;
 * processes of their own: as many as cores, up to the stages), the Worker's own default (a pass in flight per
 * stage), and the GPipe micro-batches the lanes replaced.
 */
export function layouts(stages: number): LayoutSpec[] {
  return [
    { name: 'one process', apart: false, vars: startDefault(stages, false) },
    { name: 'own processes', apart: true, vars: startDefault(stages, true) },
    { name: 'own processes, a pass in flight per stage', apart: true, vars: { PIPELINE_IN_FLIGHT: String(stages) } },
    {
      name: 'own processes, micro-batches (the last default)',
      apart: true,
      vars: { PIPELINE_IN_FLIGHT: '1', PIPELINE_MICROBATCHES: String(stages) },
    },
  ];
}

export interface ProcessesCaseResult {
  model: string;
  dtype: string;
  stages: number;
  streams: number;
  /** Tokens each stream generates. */
  tokens: number;
  settings: Record<string, string>;
  /** Every stream's tokens together ÷ the time until the last ended, tok/s, per layout (layouts()' names). */
  layouts: { name: string; vars: Record<string, string>; tokPerS: Sampled }[];
  /** Own processes ÷ one process, each as `npm start` runs it, run by run. */
  ownVsOne: Sampled;
  /** Greedy texts of the same prompts in every layout: the same kernels on the same rows. */
  sameText: { equal: number; prompts: number };
}

interface Layout {
  url: string;
  stop(): Promise<void>;
}

/** Head and stages from generated configs (tagged apart per layout): in one process, or each in its own. */
export async function startLayout(
  vars: Record<string, string>,
  stages: number,
  apart: boolean,
  tag: string,
): Promise<Layout> {
  const toml = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8');
  const files = writePipelineConfigs(ROOT, withVars(toml, vars), stages, vars, tag);
  const dirs: string[] = [];
  const servers: DevServer[] = [];
  const stop = async () => {
    for (const server of servers) await server.stop();
    for (const f of files) rmSync(join(ROOT, f), { force: true });
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  };
  const start = (configs: string[]) => {
    const dir = mkdtempSync(join(tmpdir(), 'stage-processes-'));
    dirs.push(dir);
    return startDevServer({}, dir, { configs, readyWithinMs: 120_000 });
  };
  try {
    if (apart) for (const file of files.slice(1)) servers.push(await start([file]));
    const head = await start(apart ? [files[0]] : files);
    servers.unshift(head);
    return { url: head.url, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function greedyText(url: string, prompt: string, tokens: number): Promise<string> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ prompt, max_tokens: tokens, temperature: 0, ignore_eos: true }),
  });
  if (!res.ok) throw new Error(`${url} answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { choices: { text: string }[] }).choices[0].text;
}

/** `n` streams of `tokens` at once; their tokens together per second. */
export async function together(url: string, n: number, tokens: number): Promise<number> {
  // Wakes whatever wrangler dev evicted while the other layout ran (a stage reloads its layers). A stage that
  // came back as a new object more than the head retries fails that request: asked again, counted.
  for (let attempt = 1; ; attempt++) {
    try {
      await greedyText(url, 'Hi', 1);
      break;
    } catch (err) {
      if (attempt === 3) throw err;
      log(`waking ${url}, try ${attempt}: ${String(err).slice(0, 200)}`);
    }
  }
  // Warm: a stage evicted while the other layouts ran comes back cold (its kernels not yet tiered up by V8).
  await Promise.all(streams({ url }, n, 8));
  const t0 = performance.now();
  await Promise.all(streams({ url }, n, tokens));
  return (n * tokens * 1000) / (performance.now() - t0);
}

export async function runProcessesCase(runs: number): Promise<ProcessesCaseResult> {
  const model = 'bench-360m';
  const dtype = 'q4';
  const stages = 3;
  const n = 16;
  const tokens = 64;
  ensureBenchModels([{ model, dtype }]);
  const files = await startStaticServer(modelDir(model), { ranges: true });
  // 16 streams of ~90 tokens need ~1,450 tokens of KV: int8 rows in 48 MiB over the stages hold ~2,300.
  const settings: Record<string, string> = {
    BACKEND: 'kernels',
    SHARD_COUNT: '1',
    KV_DTYPE: 'int8',
    KV_CACHE_MB: '48',
    MAX_BATCH: '16',
    KV_STORE_MB: '0',
    PIPELINE_VOCAB: 'head',
  };
  const vars = { MODEL: model, MODEL_DTYPE: dtype, MEMORY_BUDGET_MB: '128', MODEL_URL: files.url, ...settings };
  const up: Layout[] = [];
  const LAYOUTS = layouts(stages);
  try {
    log(`${model} ${dtype} on ${stages} stages: ${LAYOUTS.map((l) => l.name).join('; ')}`);
    for (const [i, spec] of LAYOUTS.entries())
      up.push(await startLayout({ ...vars, ...spec.vars }, stages, spec.apart, `bench${process.pid}p${i}`));
    const prompts = ['Once upon a time', 'The sea was calm', 'A dog and a cat', 'In the beginning'];
    let equal = 0;
    for (const prompt of prompts) {
      const texts = await Promise.all(up.map((layout) => greedyText(layout.url, prompt, 24)));
      if (texts.every((t) => t === texts[0])) equal++;
    }
    log(`greedy: ${equal}/${prompts.length} texts equal in every layout`);
    const samples = new Samples();
    for (let run = -1; run < runs; run++) {
      // Each run in another order, so no layout always follows the same one.
      const order = LAYOUTS.map((_, i) => (i + Math.max(run, 0)) % LAYOUTS.length);
      for (const i of order) {
        const tokPerS = await together(up[i].url, n, tokens);
        if (run >= 0) samples.add(LAYOUTS[i].name, tokPerS);
      }
      if (run >= 0)
        log(
          `run ${run + 1}/${runs}: ${LAYOUTS.map((l) => `${l.name} ${samples.get(l.name).at(-1)!.toFixed(1)}`).join(', ')} tok/s`,
        );
    }
    const [one, own] = LAYOUTS.map((l) => samples.get(l.name));
    return {
      model,
      dtype,
      stages,
      streams: n,
      tokens,
      settings,
      layouts: LAYOUTS.map((l) => ({ name: l.name, vars: l.vars, tokPerS: sampled(samples.get(l.name)) })),
      ownVsOne: ratioByRun(own, one),
      sameText: { equal, prompts: prompts.length },
    };
  } finally {
    for (const layout of up) await layout.stop();
    await files.close();
  }
}

// The stages section's `processes` case: pipeline stages each in a `wrangler dev` process of its own (the dev
// registry connects them, as `npm start -- --stage-processes` runs them) against all of them in one process,
// 16 concurrent streams each. In one process every isolate shares workerd's one thread, so a pass's
// micro-batches go through the stages one after another; in processes of their own the stages compute at once,
// on as many cores as the machine has. The two layouts are up side by side and measured run by run in turn.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startDevServer, type DevServer } from '../lib/dev-server.js';
import { startStaticServer } from '../lib/static-server.js';
import { withVars, writePipelineConfigs } from '../lib/stage-configs.js';
import { streams } from './edge-memory.js';
import { ensureBenchModels, modelDir } from './models.js';
import { ratioByRun, sampled, Samples, type Sampled } from './stats.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const log = (s: string): void => console.error(`stages (processes): ${s}`);

export interface ProcessesCaseResult {
  model: string;
  dtype: string;
  stages: number;
  streams: number;
  /** Tokens each stream generates. */
  tokens: number;
  settings: Record<string, string>;
  /** Every stream's tokens together ÷ the time until the last ended, tok/s. */
  oneProcess: Sampled;
  ownProcesses: Sampled;
  ownVsOne: Sampled;
  /** Greedy texts of the same prompts in both layouts: the same kernels on the same rows. */
  sameText: { equal: number; prompts: number };
}

interface Layout {
  url: string;
  stop(): Promise<void>;
}

/** Head and stages from generated configs (tagged apart per layout): in one process, or each in its own. */
async function startLayout(vars: Record<string, string>, stages: number, apart: boolean, tag: string): Promise<Layout> {
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
async function together(url: string, n: number, tokens: number): Promise<number> {
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
  const layouts: Record<'one' | 'own', Layout | undefined> = { one: undefined, own: undefined };
  try {
    log(`${model} ${dtype} on ${stages} stages: one wrangler dev, and one per stage`);
    layouts.one = await startLayout(vars, stages, false, `bench${process.pid}p1`);
    layouts.own = await startLayout(vars, stages, true, `bench${process.pid}pn`);
    const { one, own } = layouts;
    const prompts = ['Once upon a time', 'The sea was calm', 'A dog and a cat', 'In the beginning'];
    let equal = 0;
    for (const prompt of prompts)
      if ((await greedyText(one.url, prompt, 24)) === (await greedyText(own.url, prompt, 24))) equal++;
    log(`greedy: ${equal}/${prompts.length} texts equal in both layouts`);
    const samples = new Samples();
    for (let run = -1; run < runs; run++) {
      const order: ['one' | 'own', Layout][] = [
        ['one', one],
        ['own', own],
      ];
      if (run % 2 === 1) order.reverse();
      for (const [name, layout] of order) {
        const tokPerS = await together(layout.url, n, tokens);
        if (run >= 0) samples.add(name, tokPerS);
      }
      if (run >= 0)
        log(
          `run ${run + 1}/${runs}: ${n} streams ${samples.get('one').at(-1)!.toFixed(1)} tok/s in one process, ` +
            `${samples.get('own').at(-1)!.toFixed(1)} in processes of their own`,
        );
    }
    return {
      model,
      dtype,
      stages,
      streams: n,
      tokens,
      settings,
      oneProcess: sampled(samples.get('one')),
      ownProcesses: sampled(samples.get('own')),
      ownVsOne: ratioByRun(samples.get('own'), samples.get('one')),
      sameText: { equal, prompts: prompts.length },
    };
  } finally {
    await layouts.one?.stop();
    await layouts.own?.stop();
    await files.close();
  }
}

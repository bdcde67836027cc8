// LoRA adapters on the kernels (issue 46, "Bench rows"): decode cost of adapter rows against base rows on
// bench-135m (SmolLM2-135M's shapes) q4 and int8, with test adapters written beside it (scripts/model/lora-adapters.ts):
//   - batch 1: one adapter row (rank 8 on q/v, rank 16 on all seven projections) against one base row;
//   - batch 16: 16 rows across 4 adapters against 16 base rows;
//   - memory per adapter (its float32 A and B).
// Timed as passes of decode steps through the runner (each row one token a pass), runs interleaved so a noisy
// moment on this shared machine hits both sides; the ratio is taken per run, then the median.
//
//   tsx scripts/bench/lora.ts [--runs N] [--steps N] [--dtypes q4,int8] [--json FILE]   (npm run bench: section lora)
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { LoraAdapter } from '../../src/engine/adapters/lora-adapter.js';
import { Engine } from '../../src/engine/engine.js';
import type { ModelDtype } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { writeTestAdapters, type TestAdapter } from '../model/lora-adapters.js';
import { ensureBenchModels, modelDir } from './models.js';
import { ratioByRun, round, sampled, type Sampled } from './stats.js';

const ALL = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
/** The adapters the rows run with: rank 8 on q/v (the common recipe) and rank 16 everywhere, and two more for 4. */
export const BENCH_ADAPTERS: readonly TestAdapter[] = [
  { name: 'bench-qv-r8', rank: 8, alpha: 16, modules: ['q_proj', 'v_proj'], seed: 21 },
  { name: 'bench-all-r16', rank: 16, alpha: 32, modules: ALL, seed: 22 },
  { name: 'bench-attn-r16', rank: 16, alpha: 16, modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj'], seed: 23 },
  { name: 'bench-mlp-r8', rank: 8, alpha: 16, modules: ['gate_proj', 'up_proj', 'down_proj'], seed: 24 },
];

export interface LoraBenchRow {
  dtype: ModelDtype;
  /** What the adapter rows run with ('4 adapters' for the batch of 16). */
  case: string;
  batch: number;
  /** Decode tokens/s of all rows together. */
  base: Sampled;
  adapters: Sampled;
  /** adapter time / base time per run (≤ 1.15 at batch 1 and ≥ 0.85 throughput at 16 are the targets). */
  costRatio: Sampled;
}

export interface LoraBench {
  rows: LoraBenchRow[];
  memory: { name: string; rank: number; modules: number; bytes: number }[];
}

/** ms a decode pass of `rows` rows takes, over `steps` passes after a prefill of 8 tokens each. */
function decodeMs(engine: Engine, adapters: (LoraAdapter | undefined)[], steps: number): number {
  const rows = adapters.map((adapter, i) => {
    const kv = engine.kv.create(undefined, adapter);
    engine.kv.reserve(kv, 8 + steps);
    return { kv, tokens: [1, 2, 3, 4, 5, 6, 7, 8 + i] };
  });
  engine.runner.forward(rows);
  const t0 = performance.now();
  for (let s = 0; s < steps; s++)
    engine.runner.forward(rows.map((r, i) => ({ kv: r.kv, tokens: [(s * 7 + i) % 400] })));
  const ms = (performance.now() - t0) / steps;
  for (const r of rows) engine.kv.free(r.kv);
  return ms;
}

export async function runLoraBench(runs: number, steps: number, dtypes: ModelDtype[]): Promise<LoraBench> {
  ensureBenchModels(dtypes.map((dtype) => ({ model: 'bench-135m', dtype })));
  const folder = modelDir('bench-135m');
  // Written for this section and taken away after it: a folder that lists adapters keeps a share of the budget
  // for them (ADAPTER_CACHE_MB), which the other sections' bench-135m must not count.
  writeTestAdapters(folder, 'bench-135m', BENCH_ADAPTERS);
  try {
    return await measure(folder, runs, steps, dtypes);
  } finally {
    rmSync(join(folder, 'adapters'), { recursive: true, force: true });
  }
}

async function measure(folder: string, runs: number, steps: number, dtypes: ModelDtype[]): Promise<LoraBench> {
  const out: LoraBench = { rows: [], memory: [] };
  for (const dtype of dtypes) {
    const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(folder), {
      dtype,
      kvCacheBytes: 48 << 20,
      adapterCacheBytes: 64 << 20,
    });
    const adapters = await Promise.all(BENCH_ADAPTERS.map((a) => engine.loadAdapter(a.name)));
    if (out.memory.length === 0)
      out.memory = adapters.map((a) => ({ name: a.name, rank: a.rank, modules: a.modules.length, bytes: a.bytes }));
    const cases: [string, (LoraAdapter | undefined)[]][] = [
      ['rank 8, q/v', [adapters[0]]],
      ['rank 16, all 7', [adapters[1]]],
      ['4 adapters (ranks 8-16)', Array.from({ length: 16 }, (_, i) => adapters[i % 4])],
    ];
    for (const [name, rowAdapters] of cases) {
      const base: number[] = [];
      const lora: number[] = [];
      decodeMs(engine, rowAdapters, 2); // warm both paths
      for (let r = 0; r < runs; r++) {
        base.push(
          decodeMs(
            engine,
            rowAdapters.map(() => undefined),
            steps,
          ),
        );
        lora.push(decodeMs(engine, rowAdapters, steps));
      }
      const tps = (ms: number[]) => sampled(ms.map((m) => round((1000 * rowAdapters.length) / m, 1)));
      const row = {
        dtype,
        case: name,
        batch: rowAdapters.length,
        base: tps(base),
        adapters: tps(lora),
        costRatio: ratioByRun(lora, base),
      };
      console.error(
        `lora ${dtype} ${name} x${row.batch}: base ${row.base.median} tok/s, adapters ${row.adapters.median} tok/s, cost ${row.costRatio.median.toFixed(2)}x`,
      );
      out.rows.push(row);
    }
    await engine.runner.release();
  }
  return out;
}

export function loraTable(b: LoraBench): string {
  const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
  return [
    "LoRA adapters on the kernels, bench-135m: decode passes of adapter rows against base rows (deltas as the kernels' float32 products), median of runs",
    '',
    '| weights | adapter rows | batch | base tok/s | adapter tok/s | adapter cost (runs) |',
    '|---|---|---|---|---|---|',
    ...b.rows.map(
      (r) =>
        `| ${r.dtype} | ${r.case} | ${r.batch} | ${r.base.median} | ${r.adapters.median} | ${r.costRatio.median.toFixed(2)}× (${r.costRatio.runs.map((x) => x.toFixed(2)).join(', ')}) |`,
    ),
    '',
    '| adapter | rank | modules | memory (A and B as float32, what ADAPTER_CACHE_MB counts) |',
    '|---|---|---|---|',
    ...b.memory.map((m) => `| ${m.name} | ${m.rank} | ${m.modules} | ${kib(m.bytes)} |`),
  ].join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '5' },
      steps: { type: 'string', default: '16' },
      dtypes: { type: 'string', default: 'q4,int8' },
      json: { type: 'string' },
    },
  });
  const result = await runLoraBench(
    Number(values.runs),
    Number(values.steps),
    values.dtypes.split(',') as ModelDtype[],
  );
  console.log(loraTable(result));
  if (values.json) writeFileSync(values.json, JSON.stringify(result));
}

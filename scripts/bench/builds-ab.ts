// Two relaxed builds of the kernels side by side: bench-135m batch-1 decode, one engine per build in one process,
// 64-token generations alternated, CPU time (process.cpuUsage: steal on a shared VM is not counted), `N` pairs
// (default 7). Prints each build's best tok/s and the median of B ÷ A by pair; A against itself is the control.
// Both must be builds this V8 runs exactly (not the dot-add build, whose 8-bit products need a fused dot product
// that Node 20's V8 lacks): the warm-up's greedy tokens must be the same on both, or it stops.
//
//   tsx scripts/bench/builds-ab.ts A.wasm B.wasm      (env DTYPE=q4|int8, N=7)
import { Engine } from '../../src/engine/engine.js';
import type { ModelDtype } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { ensureBenchModels, modelDir } from './models.js';
import { relaxedBuildFile } from './products.js';
import { cpuSeconds } from './stats.js';

const [a, b] = process.argv.slice(2);
if (!a || !b) {
  console.error('usage: tsx scripts/bench/builds-ab.ts A.wasm B.wasm');
  process.exit(2);
}
const dtype = (process.env.DTYPE ?? 'q4') as ModelDtype;
const pairs = Number(process.env.N ?? 7);
ensureBenchModels([{ model: 'bench-135m', dtype }]);

const runtime = await nodeRuntime('kernels');
const engines = await Promise.all(
  [a, b].map((file) =>
    Engine.load(
      { ...runtime, kernels: relaxedBuildFile(file), kernels8Bit: undefined },
      directorySource(modelDir('bench-135m')),
      { dtype, kvCacheBytes: 64 * 2 ** 20 },
    ),
  ),
);
async function greedy(engine: Engine, n: number): Promise<{ ids: number[]; seconds: number }> {
  const t0 = cpuSeconds();
  const ids: number[] = [];
  const request = { prompt_ids: [1, 2, 3, 4], max_tokens: n, temperature: 0, ignore_eos: true };
  for await (const e of engine.generate(request)) if (e.type === 'token') ids.push(e.tokenId);
  return { ids, seconds: cpuSeconds() - t0 };
}
async function tokensPerSecond(engine: Engine, n: number): Promise<number> {
  const { ids, seconds } = await greedy(engine, n);
  return ids.length / seconds;
}
const warm = [await greedy(engines[0], 16), await greedy(engines[1], 16)];
if (warm[0].ids.join() !== warm[1].ids.join()) {
  console.error(`A and B give different greedy tokens: ${warm[0].ids.join(' ')} against ${warm[1].ids.join(' ')}`);
  process.exit(1);
}
const best = [0, 0];
const ratios: number[] = [];
for (let i = 0; i < pairs; i++) {
  const r = [await tokensPerSecond(engines[0], 64), await tokensPerSecond(engines[1], 64)];
  best[0] = Math.max(best[0], r[0]);
  best[1] = Math.max(best[1], r[1]);
  ratios.push(r[1] / r[0]);
}
ratios.sort((x, y) => x - y);
console.log(
  `${dtype}: A best ${best[0].toFixed(1)} tok/s, B best ${best[1].toFixed(1)} tok/s (CPU time); B ÷ A by pair: median ${ratios[ratios.length >> 1].toFixed(2)} (${ratios.map((x) => x.toFixed(2)).join(', ')})`,
);
for (const engine of engines) await engine.runner.release();

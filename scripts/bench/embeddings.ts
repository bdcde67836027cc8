// Embeddings, measured: vectors per second on bench-135m (SmolLM2-135M's shapes, random weights) on our kernels,
// one thread, inputs of `tokens` token ids each: one request at a time (batch 1), and 32 at once (one engine batch;
// the prefill of 32 inputs shares each pass). The medians of `runs` runs.
//
//   tsx scripts/bench/embeddings.ts [--dtype fp32|q4] [--runs N] [--tokens N] [--inputs N] [--json FILE]
import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { embed } from '../../src/engine/embeddings/embed.js';
import { Engine } from '../../src/engine/engine.js';
import type { ModelDtype } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { ensureBenchModels, modelDir } from './models.js';
import { type Sampled, sampled } from './stats.js';

export interface EmbeddingsBench {
  model: string;
  dtype: string;
  runner: string;
  /** Token ids per input, and inputs embedded per run at each batch size. */
  tokens: number;
  inputs: number;
  /** Vectors per second, by batch size (concurrent requests). */
  perSecond: Record<string, Sampled>;
}

const BATCHES = [1, 32];

export async function benchEmbeddings(
  dtype: ModelDtype,
  runs: number,
  tokens: number,
  inputs: number,
  log: (s: string) => void,
): Promise<EmbeddingsBench> {
  ensureBenchModels([{ model: 'bench-135m', dtype }]);
  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('bench-135m')), {
    dtype,
    maxBatchSize: 32,
    maxTokensPerStep: 32 * tokens,
    kvCacheBytes: 256 * 2 ** 20,
  });
  const vocab = engine.config.vocabSize;
  let seed = 1;
  const input = (): number[] => Array.from({ length: tokens }, () => 3 + ((seed++ * 2654435761) % (vocab - 3)));
  const perBatch: Record<string, number[]> = Object.fromEntries(BATCHES.map((b) => [b, []]));
  await embed(engine, { prompt_ids: input() }, undefined); // warm-up
  for (let run = 0; run < runs; run++)
    for (const batch of BATCHES) {
      const started = performance.now();
      for (let done = 0; done < inputs; done += batch)
        await Promise.all(
          Array.from({ length: Math.min(batch, inputs - done) }, () =>
            embed(engine, { prompt_ids: input() }, undefined),
          ),
        );
      const perS = inputs / ((performance.now() - started) / 1000);
      perBatch[batch].push(perS);
      log(`embeddings run ${run + 1}: batch ${batch}: ${perS.toFixed(1)} vectors/s`);
    }
  await engine.runner.release();
  return {
    model: 'bench-135m',
    dtype,
    runner: engine.runner.name,
    tokens,
    inputs,
    perSecond: Object.fromEntries(BATCHES.map((b) => [b, sampled(perBatch[b])])),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      dtype: { type: 'string', default: 'fp32' },
      runs: { type: 'string', default: '5' },
      tokens: { type: 'string', default: '32' },
      inputs: { type: 'string', default: '64' },
      json: { type: 'string' },
    },
  });
  const result = await benchEmbeddings(
    values.dtype as ModelDtype,
    Number(values.runs),
    Number(values.tokens),
    Number(values.inputs),
    (s) => console.error(s),
  );
  console.log(JSON.stringify(result, null, 2));
  if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
}

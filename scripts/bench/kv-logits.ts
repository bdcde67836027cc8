// What each KV_DTYPE does to logits over a long prompt: bench-135m on the kernels, the last logits of one
// prompt per KV dtype, each against fp16 KV's (the yardstick: llama.cpp's and vLLM's 8-bit caches are
// judged against their 16-bit ones). Random weights amplify every rounding: read it beside the held-out loss
// of `npm run model:quality -- --sections kv`.
//   npx tsx scripts/bench/kv-logits.ts [--tokens 2048] [--dtype int8]
import { parseArgs } from 'node:util';
import { Engine } from '../../src/engine/engine.js';
import { KV_DTYPES } from '../../src/engine/kv/kv-dtype.js';
import type { ModelDtype } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { ensureBenchModels, modelDir } from './models.js';

const { values } = parseArgs({
  options: { tokens: { type: 'string', default: '2048' }, dtype: { type: 'string', default: 'int8' } },
});
const tokens = Number(values.tokens);
const dtype = values.dtype as ModelDtype;
ensureBenchModels([{ model: 'bench-135m', dtype }]);
const prompt = Array.from({ length: tokens }, (_, i) => 3 + ((i * 7919 + 104729) % 40000));

const logits = new Map<string, Float32Array>();
for (const kvDtype of KV_DTYPES) {
  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('bench-135m')), {
    dtype,
    kvDtype,
    autoRun: false,
    kvCacheBytes: 200 * 2 ** 20,
    maxTokensPerStep: 8192,
  });
  const kv = engine.kv.create();
  engine.kv.reserve(kv, tokens);
  logits.set(kvDtype, (await engine.runner.forward([{ kv, tokens: prompt }])).last(0).slice());
  await engine.runner.release();
}

const fp16 = logits.get('fp16')!;
const mean = fp16.reduce((a, x) => a + x, 0) / fp16.length;
const std = Math.sqrt(fp16.reduce((a, x) => a + (x - mean) ** 2, 0) / fp16.length);
const argmax = (a: Float32Array) => a.reduce((best, x, i) => (x > a[best] ? i : best), 0);
for (const [kvDtype, l] of logits)
  console.log(
    JSON.stringify({
      model: `bench-135m ${dtype}`,
      tokens,
      kvDtype,
      maxAbsFromFp16: l.reduce((m, x, i) => Math.max(m, Math.abs(x - fp16[i])), 0),
      logitStd: std,
      sameArgmax: argmax(l) === argmax(fp16),
    }),
  );

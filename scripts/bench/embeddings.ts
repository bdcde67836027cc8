// Embeddings, measured: vectors per second on our kernels, one thread, `inputs` inputs a run: one request at a time
// (batch 1), and 32 at once (one engine batch; the prefill of 32 inputs shares each pass). The medians of `runs` runs.
// Inputs are texts of about `tokens` tokens (random words from a fixed list).
//   - bench-135m (SmolLM2-135M's shapes, random weights), fp32 or q4; at fp32 beside two peers on the same weights
//     exported as optimum exports an embedding model (`last_hidden_state`, no LM head), last-token pooling and L2 as
//     ours, the same texts, each run alternating them: transformers.js' feature-extraction pipeline (in Node it runs
//     onnxruntime-node, native, one thread: it offers no WebAssembly device there), and that graph on
//     onnxruntime-web's WebAssembly build, one thread (what transformers.js runs in browsers and workers; the
//     tokenising, padding and pooling done as its pipeline does them). Ratios per run, and the least cosine between
//     our vectors and each peer's;
//   - bench-qwen3-0.6b (Qwen3-Embedding-0.6B's shapes: a qwen3 model, last-token pooling), as GGUF Q8_0 or Q4_0.
//
//   tsx scripts/bench/embeddings.ts [--model bench-135m|bench-qwen3-0.6b] [--dtype fp32|q4|Q8_0|Q4_0] [--runs N]
//     [--tokens N] [--inputs N] [--no-peer] [--json FILE]
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { embed } from '../../src/engine/embeddings/embed.js';
import { Engine } from '../../src/engine/engine.js';
import type { ModelDtype } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { makeModel } from '../model-make.js';
import type { GgufType } from '../model/gguf-writer.js';
import { ensureFolder } from './architectures.js';
import { ensureBenchModels, generatorStamp, modelDir } from './models.js';
import { cosine, ratioByRun, type Sampled, sampled } from './stats.js';

export interface EmbeddingsBench {
  model: string;
  dtype: string;
  runner: string;
  /** The tokens each input's text was built to, the tokens they encode to (the mean), and inputs per run. */
  tokens: number;
  promptTokens: number;
  inputs: number;
  /** Vectors per second, by batch size (concurrent requests). */
  perSecond: Record<string, Sampled>;
  /** The peers on the same weights and texts, where they ran. */
  peers?: {
    name: string;
    perSecond: Record<string, Sampled>;
    /** ours ÷ theirs per run. */
    ratio: Record<string, Sampled>;
    /** The least cosine between our vector and its, over the inputs compared. */
    minCosine: number;
  }[];
}

export type EmbeddingsModel = 'bench-135m' | 'bench-qwen3-0.6b';

/** A peer: texts in, one last-token-pooled, L2-normalised vector per text out. */
type Extract = (texts: string[]) => Promise<Float32Array[]>;

const FEATURES_DIR = 'bench-135m-features';

const WORDS = (
  'the a of to and in that it is was for on are as with his they at be this from have or by one had not but what ' +
  'all were when we there can an your which their said if do will each about how up out them then she many some so ' +
  'these would other into has more her two like him see time could no make than first been its who now people my ' +
  'made over did down only way find use may water long little very after words called just where most know cache ' +
  'edge model token stream worker object vector kernel memory page block batch river mountain garden window'
).split(' ');

/**
 * bench-135m's weights (its seed) as optimum exports an embedding model, fp32, under .bench/models (remade when the
 * generator changes), for transformers.js to load by name.
 */
function ensureFeatureExport(): string {
  const dir = join(modelDir('bench-135m'), '..', FEATURES_DIR);
  const stampFile = join(dir, '.stamp');
  const stamp = generatorStamp();
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) return dir;
  console.error(`embeddings: exporting bench-135m for feature extraction into ${dir} ...`);
  makeModel({ preset: 'bench-135m', outDir: dir, hub: { dtypes: [], flavour: { task: 'feature-extraction' } } });
  // Padded on the left, as Qwen3-Embedding's tokenizer is: last-token pooling of a batch reads each text's last token.
  const tokenizerConfig = join(dir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(tokenizerConfig, 'utf8')) as Record<string, unknown>;
  writeFileSync(tokenizerConfig, `${JSON.stringify({ ...config, padding_side: 'left' }, null, 2)}\n`);
  writeFileSync(stampFile, stamp);
  return dir;
}

async function transformersJs(dir: string): Promise<Extract> {
  const { env, pipeline } = await import('@huggingface/transformers');
  env.allowRemoteModels = false;
  env.localModelPath = join(dir, '..');
  const extractor = await pipeline('feature-extraction', FEATURES_DIR, {
    dtype: 'fp32',
    device: 'cpu',
    session_options: { intraOpNumThreads: 1, interOpNumThreads: 1 },
  });
  return async (texts) => {
    const out = await extractor(texts, { pooling: 'last_token', normalize: true });
    const [n, d] = out.dims as number[];
    const data = out.data as Float32Array;
    return Array.from({ length: n }, (_, i) => data.slice(i * d, (i + 1) * d));
  };
}

/**
 * The export's graph on onnxruntime-web (WebAssembly, one thread), fed as transformers.js feeds it: the batch padded
 * on the left, an attention mask, positions counted from each text's first token, empty past keys and values;
 * the last position's hidden state, L2-normalised.
 */
async function ortWeb(dir: string, encode: (text: string) => number[]): Promise<Extract> {
  const ort = await import('onnxruntime-web');
  const dist = dirname(createRequire(import.meta.url).resolve('onnxruntime-web'));
  ort.env.wasm.wasmPaths = `${pathToFileURL(dist).href}/`;
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  const session = await ort.InferenceSession.create(join(dir, 'onnx', 'model.onnx'), { executionProviders: ['wasm'] });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, number>;
  const kvHeads = config.num_key_value_heads;
  const headDim = config.head_dim ?? config.hidden_size / config.num_attention_heads;
  return async (texts) => {
    const ids = texts.map(encode);
    const b = ids.length;
    const n = Math.max(...ids.map((t) => t.length));
    const input = new BigInt64Array(b * n);
    const mask = new BigInt64Array(b * n);
    const positions = new BigInt64Array(b * n);
    for (const [r, t] of ids.entries())
      for (const [i, id] of t.entries()) {
        const at = r * n + n - t.length + i;
        input[at] = BigInt(id);
        mask[at] = 1n;
        positions[at] = BigInt(i);
      }
    const feeds: Record<string, InstanceType<typeof ort.Tensor>> = {
      input_ids: new ort.Tensor('int64', input, [b, n]),
      attention_mask: new ort.Tensor('int64', mask, [b, n]),
      position_ids: new ort.Tensor('int64', positions, [b, n]),
    };
    for (let l = 0; l < config.num_hidden_layers; l++)
      for (const kind of ['key', 'value'])
        feeds[`past_key_values.${l}.${kind}`] = new ort.Tensor('float32', new Float32Array(0), [
          b,
          kvHeads,
          0,
          headDim,
        ]);
    const out = (await session.run(feeds)).last_hidden_state;
    const H = out.dims[2];
    const data = out.data as Float32Array;
    return ids.map((_t, r) => {
      const v = data.slice((r * n + n - 1) * H, (r * n + n) * H);
      const norm = Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));
      return v.map((x) => x / norm);
    });
  };
}

const BATCHES = [1, 32];

export async function benchEmbeddings(
  model: EmbeddingsModel,
  dtype: string,
  options: { runs: number; tokens: number; inputs: number; peer: boolean },
  log: (s: string) => void,
): Promise<EmbeddingsBench> {
  const { runs, tokens, inputs } = options;
  let folder: string;
  let engineDtype: ModelDtype;
  if (model === 'bench-135m') {
    ensureBenchModels([{ model, dtype: dtype as ModelDtype }]);
    folder = modelDir(model);
    engineDtype = dtype as ModelDtype;
  } else {
    folder = await ensureFolder(model, dtype as GgufType, log);
    engineDtype = 'gguf';
  }
  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(folder), {
    dtype: engineDtype,
    maxBatchSize: 32,
    maxTokensPerStep: 32 * tokens,
    kvCacheBytes: 256 * 2 ** 20,
  });
  let seed = 1;
  // Texts of about `tokens` tokens: random words from a fixed list, added until the text encodes to `tokens` (random
  // ids decoded would re-encode to many more on a byte-level vocabulary). Both sides are given the texts.
  const word = () => WORDS[(seed++ * 2654435761) % WORDS.length];
  const text = (): string => {
    let t = word();
    while (engine.tokenizer.encode(t).length < tokens) t += ` ${word()}`;
    return t;
  };
  const texts = Array.from({ length: inputs }, text);
  const promptTokens = texts.reduce((n, t) => n + engine.tokenizer.encode(t).length, 0) / texts.length;
  log(`embeddings ${model} ${dtype}: ${inputs} texts of ${promptTokens.toFixed(1)} tokens on average`);
  const peers: { name: string; extract: Extract }[] = [];
  if (options.peer && model === 'bench-135m' && dtype === 'fp32') {
    const dir = ensureFeatureExport();
    peers.push({
      name: 'transformers.js feature-extraction (onnxruntime-node, one thread)',
      extract: await transformersJs(dir),
    });
    peers.push({
      name: 'onnxruntime-web (WebAssembly, one thread), fed as transformers.js feeds it',
      extract: await ortWeb(dir, (t) => engine.tokenizer.encode(t)),
    });
  }
  const ours = (t: string) => embed(engine, { prompt: t }, undefined).then((e) => e.embedding);
  await ours(texts[0]); // warm-up
  const minCosine: number[] = [];
  for (const { name, extract } of peers) {
    await extract([texts[0]]);
    // A batch of 8 (padding included): the vectors each peer gives for the same texts.
    const theirs = await extract(texts.slice(0, 8));
    let least = 1;
    for (const [i, v] of theirs.entries()) least = Math.min(least, cosine(await ours(texts[i]), v));
    minCosine.push(least);
    log(`embeddings: least cosine between ours and ${name} over 8 inputs: ${least.toFixed(6)}`);
  }
  const perBatch: Record<string, number[]> = Object.fromEntries(BATCHES.map((b) => [b, []]));
  const peerBatch = peers.map((): Record<string, number[]> => Object.fromEntries(BATCHES.map((b) => [b, []])));
  const timed = async (fn: () => Promise<unknown>): Promise<number> => {
    const started = performance.now();
    await fn();
    return inputs / ((performance.now() - started) / 1000);
  };
  for (let run = 0; run < runs; run++)
    for (const batch of BATCHES) {
      const groups = Array.from({ length: Math.ceil(inputs / batch) }, (_, g) =>
        texts.slice(g * batch, (g + 1) * batch),
      );
      const mine = await timed(async () => {
        for (const group of groups) await Promise.all(group.map(ours));
      });
      perBatch[batch].push(mine);
      let line = `embeddings ${model} ${dtype} run ${run + 1}: batch ${batch}: ${mine.toFixed(1)} vectors/s`;
      for (const [p, { extract }] of peers.entries()) {
        const theirs = await timed(async () => {
          for (const group of groups) await extract(group);
        });
        peerBatch[p][batch].push(theirs);
        line += `, peer ${p + 1} ${theirs.toFixed(1)}`;
      }
      log(line);
    }
  await engine.runner.release();
  return {
    model,
    dtype,
    runner: engine.runner.name,
    tokens,
    promptTokens,
    inputs,
    perSecond: Object.fromEntries(BATCHES.map((b) => [b, sampled(perBatch[b])])),
    ...(peers.length
      ? {
          peers: peers.map(({ name }, p) => ({
            name,
            perSecond: Object.fromEntries(BATCHES.map((b) => [b, sampled(peerBatch[p][b])])),
            ratio: Object.fromEntries(BATCHES.map((b) => [b, ratioByRun(perBatch[b], peerBatch[p][b])])),
            minCosine: minCosine[p],
          })),
        }
      : {}),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      model: { type: 'string', default: 'bench-135m' },
      dtype: { type: 'string', default: 'fp32' },
      'no-peer': { type: 'boolean', default: false },
      runs: { type: 'string', default: '5' },
      tokens: { type: 'string', default: '32' },
      inputs: { type: 'string', default: '64' },
      json: { type: 'string' },
    },
  });
  const result = await benchEmbeddings(
    values.model as EmbeddingsModel,
    values.dtype,
    {
      runs: Number(values.runs),
      tokens: Number(values.tokens),
      inputs: Number(values.inputs),
      peer: !values['no-peer'],
    },
    (s) => console.error(s),
  );
  console.log(JSON.stringify(result, null, 2));
  if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
}

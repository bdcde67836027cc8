// llama.cpp's WebAssembly build as a bench peer (issue 12, "Speed"): batch-1 greedy decode tokens/s of
// @wllama/wllama on bench-135m's own weights, written as GGUF F32, Q8_0 and Q4_0 by
// scripts/model/gguf-writer.ts, one thread, median of runs after a warm-up. The three models are loaded
// together and take turns within each run, so a noisy moment on this shared machine hits all of them.
//
//   tsx scripts/bench/wllama.ts [--runs N] [--tokens N] [--types F32,Q8_0,Q4_0] [--json FILE]   (npm run bench: section wllama)
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { TextTokenizer } from '../../src/tokenizer/tokenizer.js';
import { DEFAULT_SEED } from '../model-make.js';
import { GGUF_TYPES, presetGgufInput, writeLlamaGguf, type GgufType } from '../model/gguf-writer.js';
import { PRESETS } from '../model/presets.js';
import { buildTokenizerFiles } from '../tokenizer/build-tokenizer.js';
import { generatorStamp } from './models.js';
import { sampled } from './stats.js';
import { loadWllama, nonUtf8TokenIds, type WllamaNode } from './wllama-node.js';
import { wllamaBenchTable, type WllamaBenchRow } from './wllama-table.js';

export type { WllamaBenchRow } from './wllama-table.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MODEL = 'bench-135m' as const;
const GGUF_DIR = join(ROOT, '.bench/models', `${MODEL}-gguf`);
/** A short prompt (about 20 tokens); llama.cpp tokenizes it with the GGUF's copy of our tokenizer. */
const PROMPT = 'The quick brown fox jumps over the lazy dog, and then it runs back into the woods.';

export const ggufPath = (type: GgufType): string => join(GGUF_DIR, `${MODEL}-${type}.gguf`);

/** Writes bench-135m's GGUF files unless they are there and were made by the current generator. */
export function ensureBenchGguf(types: readonly GgufType[], log: (s: string) => void): void {
  const stampFile = join(GGUF_DIR, '.stamp');
  const stamp = generatorStamp();
  const fresh = existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp;
  const wanted = types.filter((t) => !fresh || !existsSync(ggufPath(t)));
  if (wanted.length === 0) return;
  if (!fresh) rmSync(GGUF_DIR, { recursive: true, force: true });
  mkdirSync(GGUF_DIR, { recursive: true });
  log(`wllama: generating ${MODEL} weights and writing GGUF ${wanted.join(', ')} into ${GGUF_DIR} ...`);
  // The same generator and seed as its ONNX files (model-make.ts), so both engines run the same weights.
  const input = presetGgufInput(MODEL, DEFAULT_SEED);
  for (const type of wanted) writeLlamaGguf(ggufPath(type), input, type);
  writeFileSync(stampFile, stamp);
}

function wllamaVersion(): string {
  const url = new URL('../../node_modules/@wllama/wllama/package.json', import.meta.url);
  return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version;
}

export async function benchWllama(
  types: readonly GgufType[],
  runs: number,
  tokens: number,
  log: (s: string) => void,
): Promise<WllamaBenchRow[]> {
  ensureBenchGguf(types, log);
  const { tokenizerJson, tokenizerConfig } = buildTokenizerFiles({ vocabSize: PRESETS[MODEL].vocabSize });
  const tokenizer = TextTokenizer.fromJson(tokenizerJson, tokenizerConfig);
  // Random weights emit byte tokens that are not UTF-8 alone, which wllama cannot return (wllama-node.ts).
  const bannedIds = nonUtf8TokenIds(tokenizer);
  const models = new Map<GgufType, WllamaNode>();
  const decode = new Map<GgufType, number[]>(types.map((t) => [t, []]));
  const endToEnd = new Map<GgufType, number[]>(types.map((t) => [t, []]));
  let promptTokens = NaN;
  try {
    for (const type of types) {
      const t0 = performance.now();
      models.set(type, await loadWllama(ggufPath(type)));
      log(`wllama: loaded ${MODEL} ${type} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    for (let run = 0; run <= runs; run++) {
      // Run 0 warms up; the order rotates from run to run.
      const order = types.map((_, i) => types[(i + run) % types.length]);
      for (const type of order) {
        const t0 = performance.now();
        const r = await models.get(type)!.greedy(PROMPT, tokens, { bannedIds });
        const wall = performance.now() - t0;
        if (r.ids.length !== tokens) throw new Error(`wllama ${type}: ${r.ids.length} tokens, wanted ${tokens}`);
        promptTokens = r.promptTokens;
        if (run === 0) continue;
        decode.get(type)!.push(r.decodeTokPerS);
        endToEnd.get(type)!.push((tokens * 1000) / wall);
      }
      if (run > 0)
        log(
          `wllama run ${run}/${runs}: ${types.map((t) => `${t} ${decode.get(t)!.at(-1)!.toFixed(1)}`).join(', ')} tok/s`,
        );
    }
  } finally {
    for (const m of models.values()) await m.exit();
  }
  return types.map((type) => ({
    model: MODEL,
    type,
    fileBytes: statSync(ggufPath(type)).size,
    promptTokens,
    decodeTokens: tokens,
    decode: sampled(decode.get(type)!),
    endToEnd: sampled(endToEnd.get(type)!),
    wllama: wllamaVersion(),
  }));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '5' },
      tokens: { type: 'string', default: '128' },
      types: { type: 'string', default: GGUF_TYPES.join(',') },
      json: { type: 'string' },
    },
  });
  const types = values.types!.split(',') as GgufType[];
  for (const t of types)
    if (!GGUF_TYPES.includes(t)) throw new Error(`unknown GGUF type "${t}" (${GGUF_TYPES.join(', ')})`);
  const rows = await benchWllama(types, Number(values.runs), Number(values.tokens), (s) => console.error(s));
  if (values.json) writeFileSync(values.json, `${JSON.stringify(rows, null, 1)}\n`);
  console.log(wllamaBenchTable(rows));
  // wllama's worker and timers would keep Node alive a little longer; the results are written.
  process.exit(0);
}

// Speculative decoding, measured side by side: greedy decode tokens/s of the same prompts with and
// without speculation, in the same engine and run, and the acceptance rate. Output must be identical
// with and without speculation (greedy); the bench checks it.
// - bench-135m-copy: bench-135m's shapes and cost, weights built to continue repeated text
//   (scripts/model/copy-weights.ts), on a prompt repeating a 16-token phrase: prompt lookup's home ground.
// - bench-135m (random weights): random models never repeat their context, so prompt lookup proposes
//   little and nothing is accepted: what speculation costs when it fails.
// - tiny with tiny-draft (its own first layer) as the draft model.
//
//   tsx scripts/bench/speculative.ts [cpu|wasm] [--runs N] [--tokens N] [--json FILE]   (npm run bench: section speculative)
import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Engine } from '../../src/engine/engine.js';
import type { GenerationRequest } from '../../src/engine/request.js';
import type { SpeculativeParams } from '../../src/engine/speculative/speculative-params.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { MODELS_DIR } from '../ensure-models.js';
import { nodeRuntime, type NodeBackend } from '../lib/runtimes.js';
import { COPY_PERIOD } from '../model/presets.js';
import { ensureBenchModels, modelDir } from './models.js';
import type { Variant } from './options.js';
import { median, ratioByRun } from './stats.js';
import { speculationTable, type SpeculationCase } from './speculative-table.js';

export type { SpeculationCase } from './speculative-table.js';

const PHRASE = COPY_PERIOD['bench-135m-copy']!;

/** Deterministic ids in [3, vocab): a phrase repeated four times (the home ground of prompt lookup), or noise. */
function promptIds(kind: SpeculationCase['prompt'], vocab: number): number[] {
  let x = 12345;
  const next = (): number => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return 3 + (x % (vocab - 3));
  };
  if (kind === 'random') return Array.from({ length: 4 * PHRASE }, next);
  const phrase = Array.from({ length: PHRASE }, next);
  return [...phrase, ...phrase, ...phrase, ...phrase];
}

/** Decode tokens/s of one greedy request (first token to last), its tokens and its speculation counts. */
async function decode(
  engine: Engine,
  request: GenerationRequest,
): Promise<{ tokPerS: number; ids: number[]; proposed: number; accepted: number }> {
  let first = 0;
  let last = 0;
  for await (const event of engine.generate(request)) {
    const now = performance.now();
    if (event.type === 'token') {
      first ||= now;
      last = now;
      continue;
    }
    const spec = event.speculation ?? { proposedTokens: 0, acceptedTokens: 0 };
    return {
      tokPerS: ((event.tokenIds.length - 1) * 1000) / (last - first),
      ids: event.tokenIds,
      proposed: spec.proposedTokens,
      accepted: spec.acceptedTokens,
    };
  }
  throw new Error('no done event');
}

export async function benchSpeculation(
  backend: NodeBackend,
  runs: number,
  tokens: number,
  log: (s: string) => void,
): Promise<SpeculationCase[]> {
  const runtime = await nodeRuntime(backend);
  ensureBenchModels(
    ['bench-135m', 'bench-135m-copy', 'tiny'].map((model) => ({ model: model as Variant['model'], dtype: 'fp32' })),
  );
  const ngram = [2, 4, 8].map((numTokens): SpeculativeParams => ({ method: 'ngram', numTokens }));
  const setups: { model: string; engine: Engine; methods: SpeculativeParams[] }[] = [
    {
      model: 'bench-135m-copy fp32',
      engine: await Engine.load(runtime, directorySource(modelDir('bench-135m-copy')), {
        intraOpNumThreads: 1,
        kvCacheBytes: 256 * 2 ** 20,
      }),
      methods: ngram,
    },
    {
      model: 'bench-135m fp32',
      engine: await Engine.load(runtime, directorySource(modelDir('bench-135m')), {
        intraOpNumThreads: 1,
        kvCacheBytes: 256 * 2 ** 20,
      }),
      methods: [{ method: 'ngram', numTokens: 4 }],
    },
    {
      model: 'tiny fp32',
      engine: await Engine.load(runtime, directorySource(modelDir('tiny')), {
        intraOpNumThreads: 1,
        draft: { source: directorySource(`${MODELS_DIR}/tiny-draft`) },
      }),
      methods: [
        { method: 'ngram', numTokens: 4 },
        { method: 'draft', numTokens: 4 },
      ],
    },
  ];
  const cases: SpeculationCase[] = [];
  for (const { model, engine, methods } of setups) {
    for (const prompt of ['repetitive', 'random'] as const) {
      const request: GenerationRequest = {
        prompt_ids: promptIds(prompt, engine.samplableVocab),
        max_tokens: tokens,
        temperature: 0,
        ignore_eos: true,
      };
      for (const m of methods) {
        const base: number[] = [];
        const spec: number[] = [];
        const acceptance: number[] = [];
        let identical = true;
        for (let run = 0; run <= runs; run++) {
          // Run 0 warms up; after it the two alternate which goes first.
          const order = run % 2 ? ['spec', 'base'] : ['base', 'spec'];
          const results = new Map<string, Awaited<ReturnType<typeof decode>>>();
          for (const which of order) {
            results.set(
              which,
              await decode(
                engine,
                which === 'spec' ? { ...request, speculative: { method: m.method, num_tokens: m.numTokens } } : request,
              ),
            );
          }
          const b = results.get('base')!;
          const s = results.get('spec')!;
          identical &&= b.ids.join() === s.ids.join();
          if (run === 0) continue;
          base.push(b.tokPerS);
          spec.push(s.tokPerS);
          acceptance.push(s.proposed ? s.accepted / s.proposed : 0);
        }
        const c: SpeculationCase = {
          model,
          prompt,
          method: m.method,
          numTokens: m.numTokens,
          baseTokPerS: median(base),
          specTokPerS: median(spec),
          speedup: ratioByRun(spec, base).median,
          acceptance: median(acceptance),
          identical,
        };
        log(
          `speculative ${backend}: ${model} ${prompt} ${m.method}×${m.numTokens}: ${c.baseTokPerS.toFixed(1)} -> ${c.specTokPerS.toFixed(1)} tok/s (${c.speedup.toFixed(2)}×), acceptance ${c.acceptance.toFixed(2)}${identical ? '' : ' OUTPUT DIFFERS'}`,
        );
        cases.push(c);
      }
    }
  }
  return cases;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      runs: { type: 'string', default: '5' },
      tokens: { type: 'string', default: '128' },
      json: { type: 'string' },
    },
  });
  const backend = (positionals[0] ?? 'cpu') as NodeBackend;
  const cases = await benchSpeculation(backend, Number(values.runs), Number(values.tokens), (s) => console.error(s));
  if (values.json) writeFileSync(values.json, `${JSON.stringify(cases, null, 1)}\n`);
  console.log(speculationTable(backend, cases));
}

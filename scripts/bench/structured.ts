// Structured outputs, measured: what a grammar costs per engine step at 16 concurrent streams on
// bench-135m (the same engine, prompts and seeds, with and without a constraint), and what compiling a
// grammar costs (first use, which also builds xgrammar's tokenizer info, then per schema; cache hits).
// Every stream stays alive for the whole run (ignore_eos free text; a grammar that cannot finish within
// max_tokens), so both runs step a full batch of 16 throughout.
//
//   tsx scripts/bench/structured.ts [cpu|kernels|wasm] [--runs N] [--tokens N] [--json FILE]
import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Engine } from '../../src/engine/engine.js';
import type { Constrained } from '../../src/engine/constraints/spec.js';
import type { GenerationRequest } from '../../src/engine/request.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { isNodeBackend, nodeRuntime, type NodeBackend } from '../lib/runtimes.js';
import { ensureBenchModels, modelDir } from './models.js';
import { median, ratioByRun, type Sampled } from './stats.js';

export interface StructuredBench {
  backend: string;
  streams: number;
  tokens: number;
  /** Median ms per engine step over the runs. */
  stepMs: { free: number; json: number; grammar: number };
  /** json / free and grammar / free, taken run by run. */
  ratio: { json: Sampled; grammar: Sampled };
  /** ms: the first compile (with tokenizer info), then each further schema, and a cache hit. */
  compileMs: { first: number; initMs: number; schemas: Record<string, number>; cacheHit: number };
}

const STREAMS = 16;

// A JSON object whose free-text field cannot close within the run's tokens (an array of >= 200 words).
const JSON_LONG: Constrained = {
  spec: {
    type: 'json_schema',
    schema: {
      type: 'object',
      properties: { words: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,12}$' }, minItems: 200 } },
      required: ['words'],
    },
  },
  param: 'response_format',
};
// Exactly 4096 letters and spaces, written as nested rules (no token spans more than a few of them).
const GRAMMAR_LONG: Constrained = {
  spec: {
    type: 'grammar',
    ebnf: 'root ::= w1024 w1024 w1024 w1024\nw1024 ::= w256 w256 w256 w256\nw256 ::= w64 w64 w64 w64\nw64 ::= w16 w16 w16 w16\nw16 ::= w4 w4 w4 w4\nw4 ::= c c c c\nc ::= [a-z ]',
  },
  param: 'structured_outputs.grammar',
};

const SCHEMAS: Record<string, Constrained> = {
  json_object: { spec: { type: 'json_object' }, param: 'x' },
  'person (nested, enum, ranges)': {
    spec: {
      type: 'json_schema',
      schema: {
        type: 'object',
        properties: {
          name: { type: 'string' },
          age: { type: 'integer', minimum: 0, maximum: 120 },
          role: { enum: ['admin', 'user', 'guest'] },
          address: {
            type: 'object',
            properties: { city: { type: 'string' }, zip: { type: 'string', pattern: '^[0-9]{5}$' } },
            required: ['city'],
          },
          tags: { type: 'array', items: { type: 'string' }, maxItems: 5 },
        },
        required: ['name', 'age', 'role'],
      },
    },
    param: 'x',
  },
  'regex (email)': { spec: { type: 'regex', pattern: '[a-z0-9._]{1,20}@[a-z]{1,12}\\.(com|org|net)' }, param: 'x' },
  'tool call (2 functions)': {
    spec: {
      type: 'tool_calls',
      parallel: true,
      tags: ['get_weather', 'get_time'].map((name) => ({
        begin: `<tool_call>\n{"name": "${name}", "arguments": `,
        schema: {
          type: 'object',
          properties: { city: { type: 'string' }, unit: { enum: ['c', 'f'] } },
          required: ['city'],
        },
        end: '}\n</tool_call>',
      })),
    },
    param: 'x',
  },
};

/** ms per step of STREAMS concurrent requests built by `make`, all started together. */
async function stepMs(engine: Engine, make: (i: number) => GenerationRequest): Promise<number> {
  const before = engine.stats().steps;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: STREAMS }, async (_, i) => {
      for await (const event of engine.generate(make(i)))
        if (event.type === 'done' && event.finishReason !== 'length')
          throw new Error(`stream ${i} ended early (${event.finishReason})`);
    }),
  );
  return (performance.now() - started) / (engine.stats().steps - before);
}

export async function benchStructured(
  backend: NodeBackend,
  runs: number,
  tokens: number,
  log: (s: string) => void,
): Promise<StructuredBench> {
  ensureBenchModels([{ model: 'bench-135m', dtype: 'fp32' }]);
  const engine = await Engine.load(await nodeRuntime(backend), directorySource(modelDir('bench-135m')), {
    intraOpNumThreads: 1,
    kvCacheBytes: 256 * 2 ** 20,
  });
  const vocab = engine.samplableVocab;
  const prompt = (i: number): number[] =>
    Array.from({ length: 16 }, (_, j) => 3 + ((i * 7919 + j * 104729) % (vocab - 3)));

  let t = performance.now();
  engine.constraints.compile(SCHEMAS['person (nested, enum, ranges)']);
  const first = performance.now() - t;
  const initMs = engine.constraints.stats.initSeconds * 1000;
  const schemas: Record<string, number> = {};
  for (const [name, c] of Object.entries({
    ...SCHEMAS,
    'long json (bench)': JSON_LONG,
    'long grammar (bench)': GRAMMAR_LONG,
  })) {
    t = performance.now();
    engine.constraints.compile(c);
    schemas[name] = performance.now() - t;
  }
  t = performance.now();
  engine.constraints.compile(SCHEMAS['person (nested, enum, ranges)']);
  const cacheHit = performance.now() - t;

  const base = (i: number, seed: number): GenerationRequest => ({
    prompt_ids: prompt(i),
    max_tokens: tokens,
    temperature: 1,
    seed: seed * 100 + i,
  });
  const free: number[] = [];
  const json: number[] = [];
  const grammar: number[] = [];
  await stepMs(engine, (i) => ({ ...base(i, 0), ignore_eos: true, max_tokens: 4 })); // warm-up
  for (let run = 0; run < runs; run++) {
    free.push(await stepMs(engine, (i) => ({ ...base(i, run), ignore_eos: true })));
    json.push(await stepMs(engine, (i) => ({ ...base(i, run), constraint: JSON_LONG })));
    grammar.push(await stepMs(engine, (i) => ({ ...base(i, run), constraint: GRAMMAR_LONG })));
    log(
      `run ${run + 1}/${runs}: ms/step free ${free[run].toFixed(2)}, json ${json[run].toFixed(2)}, grammar ${grammar[run].toFixed(2)}`,
    );
  }
  await engine.runner.release();
  const stepMsOut = { free: median(free), json: median(json), grammar: median(grammar) };
  return {
    backend,
    streams: STREAMS,
    tokens,
    stepMs: stepMsOut,
    ratio: { json: ratioByRun(json, free), grammar: ratioByRun(grammar, free) },
    compileMs: { first, initMs, schemas, cacheHit },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      runs: { type: 'string', default: '3' },
      tokens: { type: 'string', default: '48' },
      json: { type: 'string' },
    },
  });
  const backend = positionals[0] ?? 'kernels';
  if (!isNodeBackend(backend)) throw new Error(`unknown backend ${backend}`);
  const result = await benchStructured(backend, Number(values.runs), Number(values.tokens), (s) => console.error(s));
  console.log(JSON.stringify(result, null, 2));
  if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
}

// What one `npm run bench` measures. Flags win over environment variables (BENCH_<NAME>), which win over
// the defaults; the defaults are the full run whose results are committed. `--quick` is a run of a few
// minutes for checking a change: bench-135m fp32 and int8 plus tiny, batch 1 and 16, short prompts.
import { parseArgs } from 'node:util';
import type { ModelDtype } from '../../src/engine/model/model-files.js';

export type Backend = 'cpu' | 'wasm';
export const SECTIONS = [
  'decode',
  'prefill',
  'peers',
  'roofline',
  'sessions',
  'overhead',
  'service',
  'speculative',
  'webgpu',
  'wllama',
  'kernels',
  'restore',
  'responses',
  'structured',
  'embeddings',
  'edge',
  'edge-memory',
  'stages',
  'architectures',
  'lora',
  'gpu',
] as const;
export type Section = (typeof SECTIONS)[number];

export interface Variant {
  /**
   * bench-135m-copy (weights that continue repeated text) is for the speculation section only; bench-360m and
   * bench-1b (SmolLM2-360M's and Llama-3.2-1B's shapes) for the stages section only.
   */
  model: 'bench-135m' | 'bench-135m-copy' | 'bench-360m' | 'bench-1b' | 'tiny';
  dtype: ModelDtype;
}

export interface BenchOptions {
  variants: Variant[];
  /** Variants whose sessions are measured (rebuilding 4096 tokens of history is the costliest item). */
  sessionVariants: Variant[];
  backends: Backend[];
  sections: Section[];
  /** Measured runs after one warm-up; every figure is their median. */
  runs: number;
  batches: number[];
  prefillLengths: number[];
  histories: number[];
  /** Decode measurements: prompt length and tokens generated per sequence. */
  promptTokens: number;
  decodeTokens: number;
  /** The "fresh prompt" of the session comparison. */
  freshPromptTokens: number;
  /** Concurrent streaming clients of the service section. */
  clients: number[];
  out: string;
  /** Keep what <out>/results.json already holds for backends (and the service) this run does not measure. */
  append: boolean;
}

const FULL = {
  models: 'bench-135m:fp32,bench-135m:int8,bench-135m:q4,tiny:fp32',
  'session-models': '',
  backends: 'cpu,wasm',
  // gpu is asked for by name (`--sections gpu`): it wants a GPU, and its own machine's time.
  sections: SECTIONS.filter((s) => s !== 'gpu').join(','),
  runs: '5',
  batches: '1,4,16,32',
  prefill: '128,512,2048',
  histories: '256,1024,4096',
  prompt: '32',
  tokens: '32',
  fresh: '20',
  clients: '1,16',
  out: 'bench',
};
const QUICK: Partial<typeof FULL> = {
  models: 'bench-135m:fp32,bench-135m:int8,tiny:fp32',
  batches: '1,16',
  prefill: '128',
  histories: '256',
  tokens: '16',
  clients: '1,4',
};

const list = (s: string): string[] =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
const ints = (name: string, s: string): number[] => {
  const xs = list(s).map(Number);
  if (xs.length === 0 || xs.some((x) => !Number.isInteger(x) || x < 1))
    throw new Error(`--${name} wants positive integers, got "${s}"`);
  return xs;
};

export function parseBenchOptions(argv: string[], env: NodeJS.ProcessEnv = process.env): BenchOptions {
  const names = Object.keys(FULL) as (keyof typeof FULL)[];
  const { values } = parseArgs({
    args: argv,
    options: {
      ...Object.fromEntries(names.map((n) => [n, { type: 'string' as const }])),
      quick: { type: 'boolean' },
      append: { type: 'boolean' },
    },
  });
  const quick = values.quick === true || env.BENCH_QUICK === '1';
  const pick = (n: keyof typeof FULL): string =>
    ((values as Record<string, unknown>)[n] as string | undefined) ??
    env[`BENCH_${n.toUpperCase().replace('-', '_')}`] ??
    (quick ? QUICK[n] : undefined) ??
    FULL[n];

  const variantList = (s: string): Variant[] =>
    list(s).map((spec): Variant => {
      const [model, dtype = 'fp32'] = spec.split(':');
      if (model !== 'bench-135m' && model !== 'tiny') throw new Error(`unknown model "${model}" (bench-135m or tiny)`);
      if (!['fp32', 'fp16', 'int8', 'q4'].includes(dtype)) throw new Error(`unknown dtype "${dtype}"`);
      return { model, dtype: dtype as ModelDtype };
    });
  const variants = variantList(pick('models'));
  const sessionSpec = pick('session-models');
  const sessionVariants = sessionSpec
    ? variantList(sessionSpec).filter((sv) => variants.some((v) => v.model === sv.model && v.dtype === sv.dtype))
    : variants;
  const backends = list(pick('backends')) as Backend[];
  for (const b of backends) if (b !== 'cpu' && b !== 'wasm') throw new Error(`unknown backend "${b}" (cpu or wasm)`);
  const sections = list(pick('sections')) as Section[];
  for (const s of sections)
    if (!(SECTIONS as readonly string[]).includes(s))
      throw new Error(`unknown section "${s}" (${SECTIONS.join(', ')})`);
  const runs = ints('runs', pick('runs'))[0];
  return {
    variants,
    sessionVariants,
    backends,
    sections,
    runs,
    batches: ints('batches', pick('batches')),
    prefillLengths: ints('prefill', pick('prefill')),
    histories: ints('histories', pick('histories')),
    promptTokens: ints('prompt', pick('prompt'))[0],
    decodeTokens: ints('tokens', pick('tokens'))[0],
    freshPromptTokens: ints('fresh', pick('fresh'))[0],
    clients: ints('clients', pick('clients')),
    out: pick('out'),
    append: values.append === true || env.BENCH_APPEND === '1',
  };
}

export const variantName = (v: Variant): string => `${v.model} ${v.dtype}`;

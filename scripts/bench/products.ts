// One quantised matrix product, measured alone: GMAC/s and weight GB/s of `matmul_q` on bench-135m's shapes
// (SmolLM2-135M: 576 × 576, 576 × 1536, 1536 × 576; 30 layers of each), at 1, 4 and 16 rows, for 4-bit blocks
// (QV4_ZP, the relaxed build, what q4 runs) and 8-bit blocks (QV8_ZP, the baseline build, what int8 runs), with
// random planes (the speed does not depend on the values). One process, `process.cpuUsage`, the least of `reps`
// timings of enough calls to pass ~30 ms each, builds interleaved. A streaming read of 1 GiB in the same process
// gives the bandwidth roofline: what the weight bytes a product reads would allow at that rate.
//
// With --variant FILE (another relaxed build, an attempt), its relaxed-build rows are measured beside the committed ones.
//
// With --cold MiB, each product cycles over copies of its matrix that total at least that much: its weights then
// come from memory, as in a decode step, not from the caches. With --attention 64,1024, a decode step's attention
// over an 8-bit pool of that many tokens is timed too (attention-setup.ts).
//
//   tsx scripts/bench/products.ts [--reps N] [--rows 1,4,16] [--variant FILE] [--cold MiB] [--attention N,..] [--json FILE]
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { compileRelaxed, edgeKernelsModule } from '../../src/backends/edge-kernels-node.js';
import { instantiateKernels } from '../../src/engine/runners/wasm/edge-kernels.js';
import { attentionCall } from './attention-setup.js';
import { type Built, coldCopies, type Form, FORMS, productCall } from './product-setup.js';
import { createBandwidthMeter } from './roofline.js';
import { cpuSeconds } from './stats.js';

/** (K, N) of bench-135m's products: q/o, k/v, gate/up, down. */
const SHAPES: [number, number][] = [
  [576, 576],
  [576, 192],
  [576, 1536],
  [1536, 576],
  // The output projection (8-bit in a q4 model): 28 MB, far past the caches, as every layer's weights are in a pass.
  [576, 49152],
];

export interface ProductRow {
  form: Form | `${Form} variant`;
  k: number;
  n: number;
  rows: number;
  gmacs: number;
  /** Weight bytes read a second (planes and side information). */
  weightGBs: number;
}

function build(which: 'relaxed' | 'baseline'): Promise<Built> {
  return instantiateKernels(edgeKernelsModule(which));
}

/** Another relaxed build from `file`, compiled as the committed one is (TurboFan at once). */
export function relaxedBuildFile(file: string): WebAssembly.Module {
  const module = compileRelaxed(new Uint8Array(readFileSync(file)));
  if (!module) throw new Error(`${file} is not a relaxed build this Node runs`);
  return module;
}

/** Seconds per call of `call`: the least of `reps` timings of enough calls to pass ~30 ms each. */
function secondsPerCall(call: () => void, reps: number): number {
  let calls = 1;
  for (;;) {
    const t0 = cpuSeconds();
    for (let i = 0; i < calls; i++) call();
    if (cpuSeconds() - t0 > 0.03) break;
    calls *= 2;
  }
  let seconds = Number.POSITIVE_INFINITY;
  for (let r = 0; r < reps; r++) {
    const t0 = cpuSeconds();
    for (let i = 0; i < calls; i++) call();
    seconds = Math.min(seconds, (cpuSeconds() - t0) / calls);
  }
  return seconds;
}

function measure(b: Built, form: Form, k: number, n: number, rows: number, reps: number, coldMiB: number): ProductRow {
  const copies = coldCopies(form, k, n, coldMiB);
  const { call, weightBytes: bytes } = productCall(b, form, k, n, rows, FORMS[form].actBytes, copies);
  const seconds = secondsPerCall(call, reps);
  return { form, k, n, rows, gmacs: (rows * k * n) / seconds / 1e9, weightGBs: bytes / seconds / 1e9 };
}

/** A decode step's attention over an 8-bit pool of `context` tokens (attention-setup.ts). */
export interface AttentionRow {
  build: string;
  context: number;
  gmacs: number;
}

export interface ProductsOptions {
  /** Another relaxed build's file, measured beside the committed one. */
  variant?: string;
  /** Each product cycles over copies of its matrix totalling at least this, so its weights come from memory. */
  coldMiB?: number;
  /** Decode attention at these context lengths, beside the products. */
  contexts?: number[];
}

export async function benchProducts(
  rowCounts: number[],
  reps: number,
  log: (s: string) => void,
  { variant, coldMiB = 0, contexts = [] }: ProductsOptions = {},
) {
  const builds = { relaxed: await build('relaxed'), baseline: await build('baseline') };
  const other = variant ? await instantiateKernels(relaxedBuildFile(variant)) : undefined;
  const out: ProductRow[] = [];
  const report = (row: ProductRow) => {
    out.push(row);
    log(
      `${row.form.padEnd(10)} ${row.k}x${row.n} rows ${row.rows}: ${row.gmacs.toFixed(1)} GMAC/s, ${row.weightGBs.toFixed(1)} GB/s of weights`,
    );
  };
  for (const rows of rowCounts)
    for (const [k, n] of SHAPES)
      for (const form of Object.keys(FORMS) as Form[]) {
        report(measure(builds[FORMS[form].build], form, k, n, rows, reps, coldMiB));
        if (other && FORMS[form].build === 'relaxed')
          report({ ...measure(other, form, k, n, rows, reps, coldMiB), form: `${form} variant` });
      }
  const attention: AttentionRow[] = [];
  for (const context of contexts)
    for (const [name, b] of [['relaxed', builds.relaxed], ...(other ? [['variant', other] as const] : [])] as const) {
      const { call, macs } = attentionCall(b, context);
      const row = { build: name, context, gmacs: macs / secondsPerCall(call, reps) / 1e9 };
      attention.push(row);
      log(`attention int8 (${name}), one token after ${context}: ${row.gmacs.toFixed(2)} GMAC/s`);
    }
  const meter = createBandwidthMeter();
  meter.measure();
  const readGBs = Math.max(meter.measure(), meter.measure(), meter.measure()) / 1e9;
  log(`streaming read: ${readGBs.toFixed(1)} GB/s`);
  return { rows: out, attention, readGBs };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = parseArgs({
    options: {
      reps: { type: 'string', default: '5' },
      rows: { type: 'string', default: '1,4,16' },
      variant: { type: 'string' },
      cold: { type: 'string', default: '0' },
      attention: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const rowCounts = values.rows!.split(',').map(Number);
  const result = await benchProducts(rowCounts, Number(values.reps), console.log, {
    variant: values.variant,
    coldMiB: Number(values.cold),
    contexts: values.attention?.split(',').map(Number),
  });
  if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
}

// The quantised product alone inside workerd (`wrangler dev`, the V8 the service runs on), per build of the
// kernels: GMAC/s of bench-135m's shapes at 1, 4 and 16 rows. workerd's clock does not advance while a request
// computes, so each figure is timed from here: a request running the product `calls` times, less one running it
// zero times, the least of 3, over enough calls for ~60 ms; builds interleaved, `rounds` rounds after a warm-up
// round, the median.
// The worker runs the dot-add build only where its V8 fuses the int32 dot product (dot-lowering.ts), else the
// relaxed-wide one; these figures are why (docs/kernels.md, "Inside workerd"). Both against Node's relaxed build.
//
// --variant FILE times another dot-add build (a previous commit's: `git show REV:src/engine/runners/wasm/
// edge-kernels-dot-add.wasm > FILE`) beside the dot-add build, pair by pair; --attention N,.. adds a decode step's
// attention after N tokens (with --forms none, alone); --cold as products.ts's.
//
//   tsx scripts/bench/products-workerd.ts [--rounds N] [--rows 1,4,16] [--cold MiB] [--forms q4,..] [--attention N,..]
//     [--variant FILE] [--json FILE]
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { startDevServer } from '../lib/dev-server.js';
import { attentionMacs } from './attention-setup.js';
import { coldCopies } from './product-setup.js';
import { median, Samples } from './stats.js';

/** (form, build): 4-bit on the relaxed builds; 8-bit on all four (one row takes the relaxed builds' split path). */
const CASES = [
  ['q4', 'relaxed'],
  ['q4', 'relaxed-wide'],
  ['q4', 'dot-add'],
  ['int8', 'baseline'],
  ['int8 relaxed', 'relaxed'],
  ['int8 relaxed', 'relaxed-wide'],
  ['int8 relaxed', 'dot-add'],
] as const;
const SHAPES: [number, number][] = [
  [576, 1536],
  [1536, 576],
  [576, 49152],
];

export interface WorkerdProductRow {
  form: string;
  build: string;
  k: number;
  n: number;
  rows: number;
  /** The median over rounds. */
  gmacs: number;
  /** The worker's builds (relaxed-wide, dot-add): the median of their GMAC/s ÷ the relaxed build's, round by round. */
  vsRelaxed?: number;
  /** With a variant: the dot-add build's GMAC/s ÷ the variant's, round by round (timed side by side). */
  vsVariant?: number;
}

export interface WorkerdProductsOptions {
  /**
   * Each product cycles over copies of its matrix that total at least this much, so its weights come from memory as
   * a decode step's do (bench-135m q4 reads ~100 MB a token), not from the caches.
   */
  coldMiB?: number;
  /** Only these forms. */
  forms?: string[];
  /** A decode step's attention over an 8-bit pool of each many tokens too (form 'attention int8', k the context, n 0). */
  contexts?: number[];
  /**
   * Another dot-add build's file (a previous commit's, an attempt): timed right beside the dot-add build in every
   * case, alternating which goes first, as build 'variant'; the dot-add rows then carry their ratio to it.
   */
  variant?: string;
}

export async function benchProductsInWorkerd(
  rowCounts: number[],
  rounds: number,
  log: (s: string) => void,
  { coldMiB = 0, forms, contexts = [], variant }: WorkerdProductsOptions = {},
) {
  const dir = mkdtempSync(join(tmpdir(), 'products-workerd-'));
  const config = join(dir, 'wrangler.toml');
  const worker = fileURLToPath(new URL('./products-workerd-worker.ts', import.meta.url));
  // A variant is imported by an entry written here (a worker's WebAssembly is bundled, never compiled at run time).
  const main = variant ? join(dir, 'entry.ts') : worker;
  if (variant)
    writeFileSync(
      main,
      `import worker, { useVariant } from ${JSON.stringify(worker)};\nimport variant from ${JSON.stringify(resolve(variant))};\n` +
        'useVariant(variant);\nexport default worker;\n',
    );
  writeFileSync(config, `name = "products-workerd"\nmain = "${main}"\ncompatibility_date = "2025-01-01"\n`);
  const server = await startDevServer({}, dir, { configs: [config] });
  try {
    const time = async (query: string, calls: number) => {
      const t0 = performance.now();
      const res = await fetch(`${server.url}/?${query}&calls=${calls}`);
      if (!res.ok) throw new Error(`${query}: ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
      return performance.now() - t0;
    };
    /** What one round times: its key ([form, build, k, n, rows]), its query, and its multiply-adds a call. */
    type Job = { key: string; query: string; macs: number };
    /** Jobs timed one after the other; a dot-add job and its variant's are a pair, whose order alternates by round. */
    const groups: Job[][] = [];
    const add = (job: (build: string) => Job, build: string) =>
      groups.push(build === 'dot-add' && variant ? [job('dot-add'), job('variant')] : [job(build)]);
    for (const rows of rowCounts)
      for (const [k, n] of SHAPES)
        for (const [form, build] of CASES) {
          if (forms && !forms.includes(form)) continue;
          const copies = coldCopies(form, k, n, coldMiB);
          const query = `form=${encodeURIComponent(form)}&k=${k}&n=${n}&rows=${rows}&copies=${copies}`;
          add(
            (b) => ({ key: JSON.stringify([form, b, k, n, rows]), query: `build=${b}&${query}`, macs: rows * k * n }),
            build,
          );
        }
    for (const context of contexts)
      for (const build of ['baseline', 'relaxed', 'relaxed-wide', 'dot-add'])
        add(
          (b) => ({
            key: JSON.stringify(['attention int8', b, context, 0, 1]),
            query: `build=${b}&attention=${context}`,
            macs: attentionMacs(context),
          }),
          build,
        );
    const samples = new Samples();
    // Round -1 is a warm-up (workerd compiles lazily, and tiers up in the background): not kept.
    for (let round = -1; round < rounds; round++)
      for (const { key, query, macs } of groups.flatMap((g) => (round % 2 ? [...g].reverse() : g))) {
        await time(query, 100); // set up, and tiered up
        let calls = 1;
        while ((await time(query, calls)) < 60) calls *= 2;
        let ms = Number.POSITIVE_INFINITY;
        for (let r = 0; r < 3; r++) ms = Math.min(ms, ((await time(query, calls)) - (await time(query, 0))) / calls);
        if (round >= 0) samples.add(key, macs / (ms / 1000) / 1e9);
      }
    const out: WorkerdProductRow[] = [];
    for (const key of samples.keys()) {
      const values = samples.get(key);
      const [form, build, k, n, rows] = JSON.parse(key) as [string, string, number, number, number];
      // The worker's builds against Node's relaxed one round by round (the host's noise moves both alike).
      const relaxed =
        build === 'dot-add' || build === 'relaxed-wide'
          ? samples.get(JSON.stringify([form, 'relaxed', k, n, rows]))
          : undefined;
      const ratios = relaxed?.map((r, i) => values[i] / r);
      const other =
        build === 'dot-add' && variant ? samples.get(JSON.stringify([form, 'variant', k, n, rows])) : undefined;
      const vsVariant = other?.map((r, i) => values[i] / r);
      out.push({
        form,
        build,
        k,
        n,
        rows,
        gmacs: median(values),
        ...(ratios && { vsRelaxed: median(ratios) }),
        ...(vsVariant && { vsVariant: median(vsVariant) }),
      });
      const list = (a: number[]) => a.map((v) => v.toFixed(2)).join(' ');
      log(
        `${form.padEnd(12)} ${build.padEnd(8)} ${k}x${n} rows ${rows}: ${median(values).toFixed(1)} GMAC/s (${values.map((v) => v.toFixed(1)).join(' ')})` +
          (ratios ? `; ${median(ratios).toFixed(2)}x relaxed (${list(ratios)})` : '') +
          (vsVariant ? `; ${median(vsVariant).toFixed(2)}x the variant (${list(vsVariant)})` : ''),
      );
    }
    return out;
  } finally {
    await server.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      rounds: { type: 'string', default: '5' },
      rows: { type: 'string', default: '1,4,16' },
      cold: { type: 'string', default: '0' },
      forms: { type: 'string' },
      attention: { type: 'string' },
      variant: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const rows = await benchProductsInWorkerd(values.rows!.split(',').map(Number), Number(values.rounds), console.log, {
    coldMiB: Number(values.cold),
    forms: values.forms?.split(','),
    contexts: values.attention?.split(',').map(Number),
    variant: values.variant,
  });
  if (values.json) writeFileSync(values.json, JSON.stringify(rows, null, 2));
}

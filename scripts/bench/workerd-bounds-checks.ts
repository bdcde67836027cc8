// Why the same kernels run slower in workerd than in Node: workerd never calls V8's EnableWebAssemblyTrapHandler,
// so V8 compiles every WebAssembly load and store with an explicit bounds check (Node installs the handler and
// lets the guard pages catch them). This runs the products-workerd worker in three workerd processes that differ
// only in V8 flags (wrangler dev cannot pass any): as workerd runs it, with bounds checks enforced (the same code
// if workerd already checks, as it does), and with none (for measurement only: unsafe), products interleaved
// round by round, each ratio against the first, paired.
//
// --dot-add FILE runs another dot-add build (an older one: how much of its time the checks took).
//
//   tsx scripts/bench/workerd-bounds-checks.ts [--rounds N] [--dot-add FILE] [--json FILE]
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
// Both come with wrangler (pinned by the lockfile): the bundler it uses and the runtime it starts.
import { build } from 'esbuild';
import { KERNELS_BUILDS, kernelsFileName } from '../../src/backends/edge-kernels-node.js';
import { freePort } from '../lib/free-port.js';
import { median, Samples } from './stats.js';

/** The workerd binary wrangler runs (the package's CommonJS default export is its path). */
const workerdBinary: string = createRequire(import.meta.url)('workerd').default;

const CONFIGS: Record<string, string[]> = {
  'as workerd runs': [],
  'bounds checks enforced': ['--wasm-enforce-bounds-checks'],
  'no bounds checks': ['--no-wasm-bounds-checks'],
};
/** (build, form, K, N, rows): what a q4 decode step runs in the worker on an AVX-VNNI host. */
const CASES: [string, string, number, number, number][] = [
  ['dot-add', 'q4', 576, 1536, 1],
  ['dot-add', 'q4', 1536, 576, 1],
  ['dot-add', 'int8 relaxed', 576, 49152, 1],
  ['dot-add', 'q4', 576, 1536, 16],
];
/** The wasm files the products worker imports: every build. */
const FILES = KERNELS_BUILDS.map(kernelsFileName);

async function start(dir: string, name: string, flags: string[]): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const modules = FILES.map((f) => `(name = "${f}", wasm = embed "${f}")`).join(', ');
  const config = join(dir, `${name.replaceAll(' ', '-')}.capnp`);
  writeFileSync(
    config,
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "main", worker = .w)],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "main")],
  v8Flags = [${flags.map((f) => JSON.stringify(f)).join(', ')}],
);
const w :Workerd.Worker = (
  modules = [(name = "worker.js", esModule = embed "worker.js"), ${modules}],
  compatibilityDate = "2025-01-01",
);
`,
  );
  const child = spawn(workerdBinary, ['serve', config], { stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `http://127.0.0.1:${port}/`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(url)).ok) return { url, child };
    } catch {
      if (i > 100) throw new Error(`workerd (${name}) did not start`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

export async function benchBoundsChecks(rounds: number, log: (s: string) => void, dotAdd?: string) {
  const dir = mkdtempSync(join(tmpdir(), 'workerd-bounds-'));
  const wasmDir = fileURLToPath(new URL('../../src/engine/runners/wasm/', import.meta.url));
  const bundle = await build({
    entryPoints: [fileURLToPath(new URL('./products-workerd-worker.ts', import.meta.url))],
    bundle: true,
    format: 'esm',
    write: false,
    external: ['*.wasm'],
    platform: 'neutral',
  });
  let js = bundle.outputFiles[0].text;
  for (const build of KERNELS_BUILDS) {
    const f = kernelsFileName(build);
    js = js.replaceAll(`"../../src/engine/runners/wasm/${f}"`, `"./${f}"`);
    copyFileSync(build === 'dot-add' && dotAdd ? dotAdd : join(wasmDir, f), join(dir, f));
  }
  writeFileSync(join(dir, 'worker.js'), js);
  const servers = await Promise.all(
    Object.entries(CONFIGS).map(async ([name, flags]) => ({ name, ...(await start(dir, name, flags)) })),
  );
  try {
    const time = async (url: string, query: string, calls: number) => {
      const t0 = performance.now();
      const res = await fetch(`${url}?${query}&calls=${calls}`);
      if (!res.ok) throw new Error(`${query}: ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
      return performance.now() - t0;
    };
    const samples = new Samples();
    for (let round = -1; round < rounds; round++)
      for (const [buildName, form, k, n, rows] of CASES)
        for (const { name, url } of round % 2 ? [...servers].reverse() : servers) {
          const query = `build=${buildName}&form=${encodeURIComponent(form)}&k=${k}&n=${n}&rows=${rows}`;
          await time(url, query, 100);
          let calls = 1;
          while ((await time(url, query, calls)) < 60) calls *= 2;
          let ms = Number.POSITIVE_INFINITY;
          for (let r = 0; r < 3; r++)
            ms = Math.min(ms, ((await time(url, query, calls)) - (await time(url, query, 0))) / calls);
          if (round >= 0)
            samples.add(JSON.stringify([name, buildName, form, k, n, rows]), (rows * k * n) / (ms / 1000) / 1e9);
        }
    const rows = CASES.flatMap(([buildName, form, k, n, r]) => {
      const of = (name: string) => samples.get(JSON.stringify([name, buildName, form, k, n, r]));
      const base = of(servers[0].name);
      return servers.map(({ name }) => {
        const v = of(name);
        const ratio = median(v.map((x, i) => x / base[i]));
        log(`${form} ${buildName} ${k}x${n} rows ${r}, ${name}: ${median(v).toFixed(1)} GMAC/s, ${ratio.toFixed(2)}x`);
        return { config: name, build: buildName, form, k, n, rows: r, gmacs: median(v), vsWorkerd: ratio };
      });
    });
    return rows;
  } finally {
    for (const { child } of servers) child.kill();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: { rounds: { type: 'string', default: '7' }, 'dot-add': { type: 'string' }, json: { type: 'string' } },
  });
  const rows = await benchBoundsChecks(Number(values.rounds), console.log, values['dot-add']);
  if (values.json) writeFileSync(values.json, JSON.stringify(rows, null, 2));
}

// The bench's gpu section (scripts/bench/gpu.ts) without a GPU: its flags, its --help, its place among the
// sections (asked for by name, not part of the default run), its table's label for a software adapter, and the
// GPU kit's bundle step (scripts/gpu-kit/bundle.sh) producing bundles that answer --help with the kit's own
// node_modules (no tsx, no repo around them).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { GPU_BENCH_DEFAULTS, GPU_BENCH_QUICK, gpuBenchTable, parseGpuBenchArgs } from '../scripts/bench/gpu.js';
import { parseBenchOptions } from '../scripts/bench/options.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('the gpu bench section', () => {
  it('defaults to batch 1, 16, 64 and a 512-token prefill; --quick is short; flags win over --quick', () => {
    expect(parseGpuBenchArgs([])).toMatchObject({ batches: [1, 16, 64], prefill: 512, big: false });
    expect(parseGpuBenchArgs(['--quick'])).toMatchObject(GPU_BENCH_QUICK);
    expect(parseGpuBenchArgs(['--quick', '--batches', '2,8', '--big'])).toMatchObject({
      batches: [2, 8],
      prefill: GPU_BENCH_QUICK.prefill,
      big: true,
    });
    expect(GPU_BENCH_DEFAULTS.runs).toBeGreaterThan(0);
  });

  it('refuses bad numbers and unknown flags', () => {
    expect(() => parseGpuBenchArgs(['--batches', '1,0'])).toThrow(/positive integer/);
    expect(() => parseGpuBenchArgs(['--prefill', 'x'])).toThrow(/positive integer/);
    expect(() => parseGpuBenchArgs(['--nope'])).toThrow();
  });

  it('is a section asked for by name, not part of the default run', () => {
    expect(parseBenchOptions(['--sections', 'gpu'], {}).sections).toEqual(['gpu']);
    expect(parseBenchOptions([], {}).sections).not.toContain('gpu');
  });

  it('labels a software adapter as correctness only', () => {
    const table = gpuBenchTable(
      {
        adapter: 'mesa software llvmpipe',
        kind: 'software',
        label: 'lavapipe, correctness only (mesa software llvmpipe): not GPU figures',
        rows: [
          { path: 'WGSL pass', model: 'bench-135m q4', decode: { 1: 2.5 }, prefillTokensPerS: 40, dispatches: 300 },
        ],
      },
      [1],
      64,
    );
    expect(table).toContain('lavapipe, correctness only');
    expect(table).toContain('| WGSL pass | bench-135m q4 | 2.5 | 40 | 300 |');
  });

  it('answers --help on stdout with exit 0, and bench.ts lists the section', () => {
    const gpu = execFileSync(process.execPath, ['--import', 'tsx', 'scripts/bench/gpu.ts', '--help'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(gpu).toMatch(/^Usage: .*--quick/);
    const bench = execFileSync(process.execPath, ['--import', 'tsx', 'scripts/bench.ts', '--help'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(bench).toMatch(/--sections [a-z,-]*\bgpu\b/);
  });
});

describe('the GPU kit bundle step', () => {
  const app = mkdtempSync(join(tmpdir(), 'gpu-kit-app-'));
  afterAll(() => rmSync(app, { recursive: true, force: true }));

  it('bundles the gpu section, the WebGPU bench and the model generator, which run from the kit alone', () => {
    execFileSync('bash', [join(ROOT, 'scripts/gpu-kit/bundle.sh'), ROOT, app], { cwd: ROOT, stdio: 'pipe' });
    for (const f of [
      'src/backends/gpu-bench.mjs',
      'src/backends/webgpu-bench.mjs',
      'model-make.mjs',
      'shaders',
      'src/engine/runners/wasm/edge-kernels.wasm',
      'node_modules/webgpu/dist/linux-x64/dawn.node',
    ])
      expect(existsSync(join(app, f)), f).toBe(true);
    // Run from outside the repository, so nothing resolves against its node_modules.
    const help = execFileSync(process.execPath, [join(app, 'src/backends/gpu-bench.mjs'), '--help'], {
      cwd: tmpdir(),
      encoding: 'utf8',
    });
    expect(help).toMatch(/^Usage: .*gpu\.ts/);
    expect(help).not.toContain('random-weight model folder'); // model-make's own main did not run
  }, 120_000);
});

// The bench's own pieces that can be checked without timing anything: option parsing, medians and
// run-by-run ratios, the hand-assembled WebAssembly streaming read, the roofline arithmetic, the plot.
// (The bench itself is `npm run bench`, never part of the tests; nothing here imports transformers.js.)
import { describe, expect, it } from 'vitest';
import { parseBenchOptions } from '../scripts/bench/options.js';
import type { BackendResult } from '../scripts/bench/results.js';
import { createBandwidthMeter, decodeStepBytes } from '../scripts/bench/roofline.js';
import { median, ratioByRun } from '../scripts/bench/stats.js';
import { decodePlotSvg } from '../scripts/bench/svg-plot.js';

describe('bench options', () => {
  it('defaults are the full run of the issue', () => {
    const o = parseBenchOptions([], {});
    expect(o.variants.map((v) => `${v.model}:${v.dtype}`)).toEqual([
      'bench-135m:fp32',
      'bench-135m:int8',
      'bench-135m:q4',
      'tiny:fp32',
    ]);
    expect(o.backends).toEqual(['cpu', 'wasm']);
    expect(o.runs).toBe(5);
    expect(o.batches).toEqual([1, 4, 16, 32]);
    expect(o.prefillLengths).toEqual([128, 512, 2048]);
    expect(o.histories).toEqual([256, 1024, 4096]);
    expect(o.sessionVariants).toEqual(o.variants);
  });

  it('flags win over BENCH_* variables, which win over --quick and the defaults', () => {
    const o = parseBenchOptions(['--runs', '7', '--quick'], {
      BENCH_RUNS: '6',
      BENCH_BACKENDS: 'wasm',
      BENCH_SESSION_MODELS: 'tiny:fp32',
    });
    expect(o.runs).toBe(7);
    expect(o.backends).toEqual(['wasm']);
    expect(o.batches).toEqual([1, 16]); // from --quick
    expect(o.sessionVariants).toEqual([{ model: 'tiny', dtype: 'fp32' }]);
  });

  it('refuses what it cannot run, naming it', () => {
    expect(() => parseBenchOptions(['--models', 'gpt2'], {})).toThrow(/unknown model "gpt2"/);
    expect(() => parseBenchOptions(['--backends', 'cuda'], {})).toThrow(/unknown backend "cuda"/);
    expect(() => parseBenchOptions(['--batches', '1,0'], {})).toThrow(/--batches/);
    expect(() => parseBenchOptions(['--sections', 'vibes'], {})).toThrow(/unknown section/);
  });
});

describe('bench statistics', () => {
  it('medians of odd and even counts; ratios taken run by run', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    // Run by run: a noisy second run slows both sides alike and the ratio stays 2.
    expect(ratioByRun([20, 10, 22], [10, 5, 11]).median).toBe(2);
  });
});

describe('roofline', () => {
  it('the WebAssembly streaming read validates, runs and reports a plausible bandwidth', () => {
    const bytesPerS = createBandwidthMeter(64 * 2 ** 20).measure();
    expect(bytesPerS).toBeGreaterThan(1e8); // more than 0.1 GB/s, less than 10 TB/s
    expect(bytesPerS).toBeLessThan(1e13);
  });

  it('a decode step reads every weight once and each sequence its own cache', () => {
    expect(decodeStepBytes(1000, 10, 1, 40)).toBe(1400);
    expect(decodeStepBytes(1000, 10, 16, 40)).toBe(1000 + 16 * 400);
  });
});

describe('plot', () => {
  it('one line and one legend entry per bench-135m (dtype, backend); tiny is left out', () => {
    const v = (backend: 'cpu' | 'wasm', model: 'bench-135m' | 'tiny', dtype: 'fp32' | 'int8', k: number) => ({
      model,
      dtype,
      backend,
      weightBytes: 0,
      kvBytesPerToken: 0,
      decodeVsBatch1: {},
      prefill: {},
      decode: { 1: { median: k, runs: [k] }, 16: { median: 5 * k, runs: [5 * k] } },
    });
    const backends: BackendResult[] = [
      {
        backend: 'cpu',
        seconds: 1,
        variants: [
          v('cpu', 'bench-135m', 'fp32', 30),
          v('cpu', 'bench-135m', 'int8', 60),
          v('cpu', 'tiny', 'fp32', 4000),
        ],
      },
      { backend: 'wasm', seconds: 1, variants: [v('wasm', 'bench-135m', 'fp32', 25)] },
    ];
    const svg = decodePlotSvg(backends, 'title');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('<title>title</title>');
    expect(svg.match(/<path /g)).toHaveLength(3);
    expect(svg).toContain('int8 cpu');
    expect(svg).toContain('fp32 wasm');
    expect(svg).not.toContain('4000');
  });
});

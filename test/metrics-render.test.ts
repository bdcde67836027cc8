// GET /metrics renders its table of metric definitions to exactly the text the route rendered before the
// table existed: test/fixtures/metrics-exposition.prom is that old renderer's output for the fixture stats, plus
// the two conversation gauges the Conversations API added (three shards taking every branch: every optional
// part, not loaded, loaded plainly; escapes, Infinity, NaN).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { renderMetrics } from '../src/worker/metrics/render.js';
import { METRICS } from '../src/worker/metrics/table.js';
import { metricsFixture } from './fixtures/metrics-stats.js';

const expected = readFileSync(new URL('./fixtures/metrics-exposition.prom', import.meta.url), 'utf8');

describe('/metrics rendering', () => {
  it('renders the fixture stats byte for byte as before', () => {
    expect(renderMetrics(metricsFixture(), 'webgpu')).toBe(expected);
  });

  it('names each metric once, in the order of the table', () => {
    const names = METRICS.map((m) => m.name);
    expect(new Set(names).size).toBe(names.length);
    const headers = [...expected.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]);
    expect(names).toEqual(headers);
  });

  it('renders no samples, only headers, for no shards', () => {
    const text = renderMetrics([], 'wasm');
    expect(text.split('\n').filter((l) => l && !l.startsWith('#'))).toEqual([]);
    expect(text.match(/^# HELP /gm)?.length).toBe(METRICS.length);
  });
});

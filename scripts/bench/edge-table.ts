import { describeIsolateMemory } from '../lib/isolate-memory.js';
import { busyCoreNote } from './busy-core.js';
import type { EdgeBench, EdgeFigures } from './edge.js';
import type { EdgeMemoryBench } from './edge-memory.js';

// The edge sections' tables, apart from the benches themselves (which start wrangler dev).

export function edgeTable(e: EdgeBench): string {
  const f = (x: number, d = 1): string => x.toFixed(d);
  const runs = (xs: readonly number[], d = 1): string => xs.map((x) => x.toFixed(d)).join(', ');
  const rows = (r: EdgeFigures, when: string) => [
    `| batch 1, decode tok/s${when} | ${f(r.batch1.service.median)} | ${f(r.batch1.node.median)} | ${f(r.batch1.ratio.median, 2)}× | ${runs(r.batch1.ratio.runs, 2)} |`,
    `| batch 1, time to first token (ms)${when} | ${f(r.batch1.serviceTtftMs.median, 0)} | ${f(r.batch1.nodeTtftMs.median, 0)} | | |`,
    `| ${r.streams.count} streams, aggregate tok/s${when} | ${f(r.streams.service.median)} | ${f(r.streams.node.median)} | ${f(r.streams.ratio.median, 2)}× | ${runs(r.streams.ratio.runs, 2)} |`,
    `| ${r.streams.count} streams over HTTP ÷ Node batch 1${when} | | | ${f(r.streams.serviceVsNodeBatch1.median, 2)}× | ${runs(r.streams.serviceVsNodeBatch1.runs, 2)} |`,
  ];
  return [
    `**The edge** (${e.model}; wrangler dev over HTTP against the same engine in Node, run by run)`,
    '',
    '| | workerd over HTTP | Node | ratio (median of runs) | runs (ratio) |',
    '|---|---:|---:|---:|---|',
    ...rows(e, ''),
    ...(e.busy ? rows(e.busy, ', other core busy') : []),
    ...(e.busy ? ['', busyCoreNote(e.busy.neighbourGBps.median)] : []),
  ].join('\n');
}

export function edgeMemoryTable(m: EdgeMemoryBench): string {
  const lines = [
    `**Isolate memory in workerd** (${m.model} ${m.dtype}, KV ${m.kvDtype}, a ${m.vocab}-token tokenizer, ${m.streams} streams of ${m.tokens} tokens; JS heap + ArrayBuffers + WebAssembly memories, read through the inspector)`,
    '',
    '| from | shards | first request (s) | load (s) | counted by the budget | idle | loaded | streaming | after | after a structured request |',
    '|---|---:|---:|---:|---:|---|---|---|---|---|',
  ];
  const cell = (x: Parameters<typeof describeIsolateMemory>[0] | undefined): string =>
    x ? describeIsolateMemory(x) : '';
  for (const r of m.runs)
    lines.push(
      `| ${r.from} | ${r.shards ?? 1} | ${r.firstRequestSeconds.toFixed(1)} | ${r.loadSeconds.toFixed(1)} | ${((r.countedBytes ?? 0) / 2 ** 20).toFixed(1)} MiB | ${cell(r.idle)} | ${cell(r.loaded)} | ${cell(r.streaming)} | ${cell(r.after)} | ${cell(r.structured)} |`,
    );
  return lines.join('\n');
}

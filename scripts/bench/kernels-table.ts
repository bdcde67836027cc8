// The kernels section's results and their Markdown table (kept light: the report imports it).
import type { Sampled } from './stats.js';
import { busyCoreNote } from './busy-core.js';

interface SessionFigures {
  cachedTurnS: Sampled;
  freshTurnS: Sampled;
  ratio: Sampled;
}

export interface KernelsBench {
  runs: number;
  /** Batch-1 decode tokens/s per runner and dtype, and its ratio to onnxruntime-web fp32 in the same run. */
  decode: Record<string, { tokPerS: Sampled; vsOrtFp32: Sampled; vsOrtNodeFp32?: Sampled }>;
  batch16: {
    kernelsInt8: Sampled;
    ortFp32: Sampled;
    vsOwnBatch1: Sampled;
    vsOrtFp32: Sampled;
    /** 16 q4 streams against q4's own batch 1 (runs since the attention and batching work of issue 21). */
    kernelsQ4?: Sampled;
    q4VsOwnBatch1?: Sampled;
  };
  /** The same decode rows with the other core streaming memory (busy-core.ts), and the GB/s it read meanwhile. */
  busy?: Pick<KernelsBench, 'decode' | 'batch16'> & { neighbourGBps: Sampled };
  prefill512: Record<string, { tokPerS: Sampled; vsOrtFp32: Sampled }>;
  /** int8 weights: KV_DTYPE int8 (runs since its integer attention) and, in fp32Kv, the default float32 pool. */
  session: { history: number; cachedTurnS: Sampled; freshTurnS: Sampled; ratio: Sampled; fp32Kv?: SessionFigures };
  memory: { linearMemoryBytes: number; weightBytes: number; kvBytes: number };
}

const f = (x: number, digits = 1): string => x.toFixed(digits);
const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`;

function sessionLines(s: KernelsBench['session']): string[] {
  const line = (kv: string, r: SessionFigures) =>
    `| ${kv} | ${f(r.cachedTurnS.median * 1000, 0)} ms | ${f(r.freshTurnS.median * 1000, 0)} ms | ${f(r.ratio.median, 2)}× |`;
  return [
    `| Session turn (20 tokens) over ${s.history} cached tokens, kernels int8 | turn | fresh 20-token prompt | × |`,
    '|---|---:|---:|---:|',
    ...(s.fp32Kv ? [line('KV fp32', s.fp32Kv)] : []),
    line(s.fp32Kv ? 'KV int8, integer attention' : 'KV fp32', s),
  ];
}

const times = (s: Sampled | undefined): string => (s ? `${f(s.median, 2)}×` : '');

function decodeLines(k: KernelsBench): string[] {
  const b = k.busy;
  const head = b
    ? [
        '| Batch-1 decode | tok/s | × onnxruntime-web fp32 | × onnxruntime-node fp32 (two threads) | other core busy: tok/s | × onnxruntime-web fp32 | × onnxruntime-node fp32 |',
        '|---|---:|---:|---:|---:|---:|---:|',
      ]
    : [
        '| Batch-1 decode | tok/s | × onnxruntime-web fp32 | × onnxruntime-node fp32 (two threads) |',
        '|---|---:|---:|---:|',
      ];
  return [
    ...head,
    ...Object.entries(k.decode).map(([name, r]) => {
      const other = b?.decode[name];
      const busyCells = b
        ? ` ${other ? f(other.tokPerS.median) : ''} | ${times(other?.vsOrtFp32)} | ${times(other?.vsOrtNodeFp32)} |`
        : '';
      return `| ${name} | ${f(r.tokPerS.median)} | ${times(r.vsOrtFp32)} | ${times(r.vsOrtNodeFp32)} |${busyCells}`;
    }),
  ];
}

function streamLines(s: KernelsBench['batch16'], when: string): string[] {
  return [
    `| kernels int8${when} | ${f(s.kernelsInt8.median)} | ${f(s.vsOwnBatch1.median, 2)}× its batch 1, ${f(s.vsOrtFp32.median, 2)}× onnxruntime-web fp32 at 16 |`,
    ...(s.kernelsQ4 && s.q4VsOwnBatch1
      ? [`| kernels q4${when} | ${f(s.kernelsQ4.median)} | ${f(s.q4VsOwnBatch1.median, 2)}× its batch 1 |`]
      : []),
    `| onnxruntime-web fp32${when} | ${f(s.ortFp32.median)} | |`,
  ];
}

export function kernelsTable(k: KernelsBench): string {
  const lines = [
    `Edge kernels vs onnxruntime-web (bench-135m, one thread, median of ${k.runs} runs; ratios taken run by run)`,
    '',
    ...decodeLines(k),
    ...(k.busy ? ['', busyCoreNote(k.busy.neighbourGBps.median)] : []),
    '',
    '| 16 streams | aggregate tok/s | × |',
    '|---|---:|---:|',
    ...streamLines(k.batch16, ''),
    ...(k.busy ? streamLines(k.busy.batch16, ', other core busy') : []),
    '',
    '| Prefill 512 tokens | tok/s | × onnxruntime-web fp32 |',
    '|---|---:|---:|',
    ...Object.entries(k.prefill512).map(
      ([name, r]) => `| ${name} | ${f(r.tokPerS.median)} | ${f(r.vsOrtFp32.median, 2)}× |`,
    ),
    '',
    ...sessionLines(k.session),
    '',
    `Memory, q4 with a 16 MiB KV pool: linear memory ${mib(k.memory.linearMemoryBytes)} = weights ${mib(k.memory.weightBytes)} + KV ${mib(k.memory.kvBytes)} + ${mib(k.memory.linearMemoryBytes - k.memory.weightBytes - k.memory.kvBytes)} scratch and stack.`,
  ];
  return lines.join('\n');
}

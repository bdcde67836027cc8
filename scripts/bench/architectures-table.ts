// The architectures bench's result rows and table, apart from the bench itself (which loads both engines).
import type { GgufType } from '../model/gguf-writer.js';
import type { PresetName } from '../model/presets.js';
import type { Sampled } from './stats.js';

export interface ArchitectureBenchRow {
  preset: PresetName;
  architecture: string;
  headDim: number;
  type: GgufType;
  fileBytes: number;
  /** The kernels' linear memory once loaded (weights, KV pool, scratch). */
  kernelsMemoryBytes: number;
  decodeTokens: number;
  /** Batch-1 greedy decode tokens/s (tokens after the first, over the time after the first). */
  kernels: Sampled;
  llamaCpp: Sampled;
  /** kernels / llama.cpp, per run. */
  ratio: Sampled;
}

export function architecturesTable(rows: readonly ArchitectureBenchRow[]): string {
  const mib = (b: number): string => `${(b / 2 ** 20).toFixed(0)} MiB`;
  return [
    'Batch-1 greedy decode on the kernels against llama.cpp (wllama, one thread), the same GGUF file, median of runs',
    '',
    '| preset | architecture | head_dim | GGUF | file | kernels memory | kernels tok/s | llama.cpp tok/s | ratio (runs) |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.preset} | ${r.architecture} | ${r.headDim} | ${r.type} | ${mib(r.fileBytes)} | ${mib(r.kernelsMemoryBytes)} | ${r.kernels.median.toFixed(1)} | ${r.llamaCpp.median.toFixed(1)} | ${r.ratio.median.toFixed(2)}× (${r.ratio.runs.map((x) => x.toFixed(2)).join(', ')}) |`,
    ),
  ].join('\n');
}

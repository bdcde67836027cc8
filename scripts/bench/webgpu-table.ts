// The webgpu bench's result rows and table, apart from the bench itself (which loads the WebGPU runtime).
export interface WebGpuBenchRow {
  path: string;
  batch: number;
  tokensPerS: number[];
  median: number;
  vsWasm: number;
}

export function webGpuBenchTable(rows: WebGpuBenchRow[]): string {
  const lines = [
    '| path | concurrent sequences | aggregate decode tok/s (median) | vs wasm (run by run) |',
    '|---|---|---|---|',
  ];
  for (const r of rows) lines.push(`| ${r.path} | ${r.batch} | ${r.median.toFixed(1)} | ${r.vsWasm.toFixed(2)}× |`);
  return lines.join('\n');
}

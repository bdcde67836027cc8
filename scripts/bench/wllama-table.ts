import type { Sampled } from './stats.js';

// The wllama bench's result rows and table, apart from the bench itself (which loads llama.cpp's wasm).
export interface WllamaBenchRow {
  model: string;
  /** GGUF tensor type of the matrices (norms stay F32). */
  type: 'F32' | 'Q8_0' | 'Q4_0';
  fileBytes: number;
  promptTokens: number;
  decodeTokens: number;
  /** Batch-1 greedy decode tokens/s by llama.cpp's own timing of the generation (tokens after the first). */
  decode: Sampled;
  /** Generated tokens ÷ wall time of the whole request, prompt included, as seen from Node. */
  endToEnd: Sampled;
  /** @wllama/wllama version (its compat build: Node 20 has neither JSPI nor memory64). */
  wllama: string;
}

export function wllamaBenchTable(rows: readonly WllamaBenchRow[]): string {
  const lines = [
    `llama.cpp's WebAssembly build (@wllama/wllama ${rows[0]?.wllama ?? ''}, compat build, one thread) on the same weights as GGUF: batch-1 greedy decode`,
    '',
    '| model | GGUF type | file | prompt | generated | decode tok/s (median) | end to end tok/s | runs |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.model} | ${r.type} | ${(r.fileBytes / 1e6).toFixed(0)} MB | ${r.promptTokens} | ${r.decodeTokens} | ${r.decode.median.toFixed(1)} | ${r.endToEnd.median.toFixed(1)} | ${r.decode.runs.map((x) => x.toFixed(1)).join(', ')} |`,
    );
  }
  return lines.join('\n');
}

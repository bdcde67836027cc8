import type { SpeculativeParams } from '../../src/engine/speculative/speculative-params.js';

// The speculation bench's results and table, apart from the bench itself (which loads models).
export interface SpeculationCase {
  model: string;
  prompt: 'repetitive' | 'random';
  method: SpeculativeParams['method'];
  numTokens: number;
  /** Median decode tokens/s without and with speculation, and the median of their per-run ratio. */
  baseTokPerS: number;
  specTokPerS: number;
  speedup: number;
  acceptance: number;
  identical: boolean;
}

export function speculationTable(backend: string, cases: readonly SpeculationCase[]): string {
  const rows = cases.map(
    (c) =>
      `| ${c.model} | ${c.prompt} | ${c.method} | ${c.numTokens} | ${c.baseTokPerS.toFixed(1)} | ${c.specTokPerS.toFixed(1)} | **${c.speedup.toFixed(2)}×** | ${(c.acceptance * 100).toFixed(0)}% | ${c.identical ? 'yes' : 'NO'} |`,
  );
  return [
    `Speculative decoding (${backend}, greedy, batch 1): decode tokens/s without and with speculation, same prompt, same run`,
    '',
    '| model | prompt | method | γ | without | with | speedup | accepted | same output |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
}

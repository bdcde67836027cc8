import type { IsolateMemory } from '../lib/isolate-memory.js';
import type { ProcessesCaseResult } from './stage-processes.js';
import type { IsolateRow, PipelineCaseResult, ResidentCaseResult, StagesBench } from './stages.js';

// The stages section's tables, apart from the bench itself (which starts wrangler dev).

const MiB = 2 ** 20;
const mib = (b: number | undefined): string => (b === undefined ? '–' : (b / MiB).toFixed(1));
const runs = (xs: readonly number[], d = 2): string => xs.map((x) => x.toFixed(d)).join(', ');

/** Total (JS heap + ArrayBuffers + WebAssembly), in MiB. */
function memory(m: IsolateMemory | undefined): string {
  if (!m) return '–';
  const wasm = m.wasmMemories.reduce((a, b) => a + b, 0);
  return `**${mib(m.totalBytes)}** (${mib(m.jsHeapBytes)} + ${mib(m.arrayBufferBytes)} + ${mib(wasm)})`;
}

function isolatesTable(
  rows: readonly IsolateRow[],
  columns: ('loaded' | 'streaming' | 'resident')[],
  streams = 0,
): string {
  const title = { loaded: 'loaded', streaming: `under ${streams} streams`, resident: 'every prompt resident' };
  return [
    `| isolate | layers | counted by its budget (MiB) | ${columns.map((c) => `${title[c]} (MiB: JS heap + ArrayBuffers + wasm)`).join(' | ')} |`,
    `|---|---|---:|${columns.map(() => '---').join('|')}|`,
    ...rows.map(
      (r) =>
        `| ${r.name} | ${r.layers ? `${r.layers[0]}..${r.layers[1] - 1}` : 'embedding, final norm, output projection'} | ${mib(r.countedBytes)} | ${columns.map((c) => memory(r[c])).join(' | ')} |`,
    ),
  ].join('\n');
}

export function pipelineCaseTable(c: PipelineCaseResult): string {
  const b = c.batch1;
  const lines = [
    `**${c.model} ${c.dtype} on ${c.stages} pipeline stages** (wrangler dev, head + ${c.stages} stage Workers in one process, KV ${c.settings.KV_DTYPE}, KV_CACHE_MB ${c.settings.KV_CACHE_MB}; weights file ${mib(c.weightsFileBytes)} MiB; the head's MEMORY_BUDGET_MB ${c.headBudgetMb}, each stage's 128; first request ${c.firstRequestSeconds.toFixed(1)} s)`,
    '',
    isolatesTable(c.isolates, c.streams > 0 ? ['loaded', 'streaming'] : ['loaded'], c.streams),
    '',
    `Greedy, ${c.equal.prompts} prompts of ${c.equal.tokens} tokens at once over HTTP against the one-process Node engine: text equal ${c.equal.sameText}/${c.equal.prompts}, logprobs equal ${c.equal.sameLogprobs}/${c.equal.prompts} (max |Δ| ${c.equal.maxLogprobDiff}).`,
    '',
    '| batch 1, decode tok/s | over stages (HTTP) | Node, one process | one workerd isolate (HTTP) | stages ÷ Node | stages ÷ one isolate |',
    '|---|---:|---:|---:|---:|---:|',
    `| ${b.tokens} tokens after a 32-token prompt | ${b.staged.median.toFixed(1)} | ${b.node.median.toFixed(1)} | ${b.oneIsolate ? b.oneIsolate.median.toFixed(1) : '–'} | ${b.stagedVsNode.median.toFixed(2)}× (${runs(b.stagedVsNode.runs)}) | ${b.stagedVsOneIsolate ? `${b.stagedVsOneIsolate.median.toFixed(2)}× (${runs(b.stagedVsOneIsolate.runs)})` : '–'} |`,
    `| time to first token (ms) | ${b.stagedTtftMs.median.toFixed(0)} | ${b.nodeTtftMs.median.toFixed(0)} | | | |`,
  ];
  if (c.oneIsolateError) lines.push('', `One isolate: ${c.oneIsolateError}`);
  return lines.join('\n');
}

export function residentCaseTable(c: ResidentCaseResult): string {
  const cached = c.cachedTokens;
  return [
    `**${c.model} ${c.dtype} on ${c.stages} stages, ${c.sessions} prompts of ${c.tokensEach} tokens resident** (KV ${c.settings.KV_DTYPE}, KV_CACHE_MB ${c.settings.KV_CACHE_MB} over all stages: a pool of ${c.poolBlocks} blocks = ${c.poolTokens} tokens; each stage's part ${c.stageKvBytes.map(mib).join(', ')} MiB)`,
    '',
    isolatesTable(c.isolates, ['resident']),
    '',
    `Prefill ${c.prefillTokPerS.toFixed(0)} tok/s (one prompt after another); ${c.idleBlocks} blocks cached and idle after them; asked again with 8 tokens more, cached tokens: min ${Math.min(...cached)}, max ${Math.max(...cached)} (${cached.filter((t) => t >= c.tokensEach).length}/${cached.length} with all ${c.tokensEach}).`,
  ].join('\n');
}

export function processesCaseTable(c: ProcessesCaseResult): string {
  const setting = (vars: Record<string, string>) =>
    Object.entries(vars)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ') || 'defaults';
  return [
    `**${c.model} ${c.dtype} on ${c.stages} stages, ${c.streams} streams of ${c.tokens} tokens at once** (KV ${c.settings.KV_DTYPE}, KV_CACHE_MB ${c.settings.KV_CACHE_MB}; greedy texts equal in every layout ${c.sameText.equal}/${c.sameText.prompts})`,
    '',
    '| layout | settings | tok/s, all streams together | runs |',
    '|---|---|---:|---|',
    ...c.layouts.map(
      (l) => `| ${l.name} | ${setting(l.vars)} | ${l.tokPerS.median.toFixed(1)} | ${runs(l.tokPerS.runs, 1)} |`,
    ),
    `| own processes ÷ one process (as npm start runs each) | | **${c.ownVsOne.median.toFixed(2)}×** | ${runs(c.ownVsOne.runs)} |`,
  ].join('\n');
}

export function stagesTables(s: StagesBench): string {
  const out: string[] = [];
  if (s.pipeline) out.push(pipelineCaseTable(s.pipeline));
  if (s.resident) out.push(residentCaseTable(s.resident));
  if (s.big) out.push(pipelineCaseTable(s.big));
  if (s.gemma3) out.push(pipelineCaseTable(s.gemma3));
  if (s.processes) out.push(processesCaseTable(s.processes));
  return out.join('\n\n');
}

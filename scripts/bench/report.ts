import { speculationTable } from './speculative-table.js';
import { webGpuBenchTable } from './webgpu-table.js';
import { wllamaBenchTable } from './wllama-table.js';
import { edgeMemoryTable, edgeTable } from './edge-table.js';
import { kernelsTable } from './kernels-table.js';
import { stagesTables } from './stages-table.js';
import { architecturesTable } from './architectures-table.js';
import { loraTable } from './lora.js';
// Markdown tables of a results object: what the bench prints, and what docs/benchmarks.md shows.
import type { BenchResults, VariantResult } from './results.js';
import type { Sampled } from './stats.js';

const f = (x: number | undefined, d = 1): string =>
  x === undefined || !Number.isFinite(x) ? '–' : x >= 1000 && d > 0 ? x.toFixed(0) : x.toFixed(d);
const m = (s: Sampled | undefined, d = 1): string => f(s?.median, d);
const x = (s: Sampled | undefined): string => (s ? `${s.median.toFixed(2)}×` : '–');
const pct = (v: number | undefined): string =>
  v === undefined || !Number.isFinite(v) ? '–' : `${(v * 100).toFixed(0)}%`;
const name = (v: VariantResult): string => `${v.model} ${v.dtype} · ${v.backend}`;

function table(head: string[], rows: string[][]): string {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

export function markdownReport(r: BenchResults): string {
  const o = r.options;
  const all = r.backends.flatMap((b) => b.variants);
  const out: string[] = [];
  const mc = r.machine;
  out.push(
    `Machine: ${mc.cpu}, ${mc.cores} cores, ${mc.memoryGiB} GiB, ${mc.os}, Node ${mc.node}, onnxruntime-node ${mc.onnxruntimeNode}, ` +
      `onnxruntime-web ${mc.onnxruntimeWeb}, transformers.js ${mc.transformersJs}; ${mc.date}. One thread everywhere; medians of ${o.runs} runs after a warm-up; ratios taken run by run.`,
  );
  const bw = r.backends.filter((b) => b.bandwidthGBps).map((b) => `${m(b.bandwidthGBps)} GB/s (${b.backend} run)`);
  if (bw.length) out.push(`Streaming read bandwidth, one thread, WebAssembly SIMD over 1 GiB: ${bw.join(', ')}.`);

  const batches = o.batches;
  out.push(
    `\n**Decode** (prompt ${o.promptTokens} tokens, ${o.decodeTokens} generated per sequence; aggregate tokens/s over all sequences)\n`,
  );
  out.push(
    table(
      [
        'model · backend',
        ...batches.map((b) => `${b} seq`),
        ...batches.filter((b) => b > 1).map((b) => `${b}÷1`),
        'vs fp32 (1 seq)',
        'bytes/token',
        'roofline tok/s',
        'of roofline',
      ],
      all.map((v) => [
        name(v),
        ...batches.map((b) => m(v.decode[b])),
        ...batches.filter((b) => b > 1).map((b) => x(v.decodeVsBatch1[b])),
        v.dtype === 'fp32' ? '1×' : x(v.decodeVsFp32),
        v.roofline ? `${(v.roofline.bytesPerToken / 1e6).toFixed(0)} MB` : '–',
        f(v.roofline?.rooflineTokPerS),
        pct(v.roofline?.fractionOfRoofline.median),
      ]),
    ),
  );
  if (all.some((v) => v.peers)) {
    out.push(`\n**Peers at batch 1** (same ONNX file, greedy, same prompt ids, same length; decode tokens/s)\n`);
    out.push(
      table(
        [
          'model · backend',
          'engine',
          'bare onnxruntime loop',
          'engine ÷ bare',
          'transformers.js',
          'engine ÷ transformers.js',
          'same tokens as bare',
        ],
        all
          .filter((v) => v.peers)
          .map((v) => [
            name(v),
            m(v.decode[1]),
            m(v.peers!.bareOrt.decode),
            x(v.peers!.bareOrt.engineRatio),
            m(v.peers!.transformersJs?.decode),
            x(v.peers!.transformersJs?.engineRatio),
            v.peers!.bareOrt.sameTokens ? 'yes' : 'no',
          ]),
      ),
    );
  }
  if (all.some((v) => Object.keys(v.prefill).length)) {
    out.push(`\n**Prefill** (one prompt, the engine's 512-token chunks; tokens/s, and time to first token)\n`);
    out.push(
      table(
        [
          'model · backend',
          ...o.prefillLengths.map((n) => `${n} tok/s`),
          ...o.prefillLengths.map((n) => `TTFT ${n}`),
          `TTFT ${o.freshPromptTokens}`,
        ],
        all.map((v) => [
          name(v),
          ...o.prefillLengths.map((n) => m(v.prefill[n]?.tokPerS, 0)),
          ...o.prefillLengths.map((n) => (v.prefill[n] ? `${m(v.prefill[n].ttftMs, 0)} ms` : '–')),
          v.ttftFreshMs ? `${m(v.ttftFreshMs)} ms` : '–',
        ]),
      ),
    );
  }
  if (all.some((v) => v.sessions)) {
    out.push(`\n**Session continuation** (time to first token of a new ~20-token turn)\n`);
    out.push(
      table(
        [
          'model · backend',
          'history',
          'cached',
          'restored',
          'rebuilt',
          `fresh ${o.freshPromptTokens}-token prompt`,
          'cached ÷ fresh',
          'restored ÷ fresh',
          'rebuilt ÷ cached',
          'rebuilt ÷ restored',
        ],
        all.flatMap((v) =>
          Object.entries(v.sessions ?? {}).map(([h, s]) => [
            name(v),
            h,
            `${m(s.cachedMs)} ms`,
            s.restoredMs ? `${m(s.restoredMs)} ms` : '–',
            `${m(s.rebuiltMs, 0)} ms`,
            `${m(v.ttftFreshMs)} ms`,
            x(s.cachedVsFresh),
            s.restoredVsFresh ? x(s.restoredVsFresh) : '–',
            x(s.rebuiltVsCached),
            s.rebuiltVsRestored ? x(s.rebuiltVsRestored) : '–',
          ]),
        ),
      ),
    );
  }
  if (all.some((v) => v.overhead)) {
    out.push(`\n**Step overhead** (milliseconds per decode step; outside = everything but the ONNX session's run)\n`);
    out.push(
      table(
        [
          'model · backend',
          'batch',
          'step',
          'model pass',
          'gather/scatter + feeds',
          'sample, detokenise, schedule',
          'loop turn',
          'outside share',
        ],
        all.flatMap((v) =>
          Object.entries(v.overhead ?? {}).map(([b, p]) => [
            name(v),
            b,
            f(p.periodMs, 2),
            f(p.modelMs, 2),
            f(p.gatherScatterMs, 2),
            f(p.engineMs, 2),
            f(p.loopMs, 2),
            pct(p.outsideShare),
          ]),
        ),
      ),
    );
  }
  if (r.service) {
    out.push(
      `\n**Service** (${r.service.model}: \`wrangler dev\`, one shard, streaming HTTP clients; against the engine alone in Node on the same WASM backend; tokens/s end to end over all clients)\n`,
    );
    out.push(
      table(
        ['clients', 'service tok/s', 'service TTFT', 'engine tok/s', 'engine TTFT', 'service ÷ engine'],
        Object.entries(r.service.byClients).map(([n, s]) => [
          n,
          m(s.service.tokPerS, 0),
          `${m(s.service.ttftMs)} ms`,
          m(s.engine.tokPerS, 0),
          `${m(s.engine.ttftMs)} ms`,
          x(s.serviceVsEngine),
        ]),
      ),
    );
  }
  if (r.responsesChain) {
    out.push(
      `\n**A response chain against re-sending the history** (${r.responsesChain.model}: \`wrangler dev\`, one shard; each turn streamed with max 8 output tokens, time to the first text delta)\n`,
    );
    out.push(
      table(
        [
          'turn',
          'input tokens',
          'cached: chain / resend',
          'chain (previous_response_id)',
          'resend (chat completions)',
          'resend ÷ chain',
        ],
        r.responsesChain.byTurn.map((t) => [
          String(t.turn),
          `${t.inputTokens} / ${t.resendInputTokens}`,
          `${t.chainCached} / ${t.resendCached}`,
          `${m(t.chainTtftMs)} ms`,
          `${m(t.resendTtftMs)} ms`,
          x(t.resendVsChain),
        ]),
      ),
    );
  }
  if (r.serviceRestore) {
    out.push(
      `\n**Durable session KV in workerd** (${r.serviceRestore.model}: \`wrangler dev\`, one shard; a request of the history + 20 tokens, max_tokens 1, latency)\n`,
    );
    out.push(
      table(
        [
          'history',
          'cached (pool)',
          'restored (SQLite, after a restart)',
          'rebuilt (prefill)',
          'fresh 20 tokens',
          'rebuilt ÷ restored',
          'restored ÷ fresh',
        ],
        Object.entries(r.serviceRestore.byHistory).map(([h, s]) => [
          h,
          `${m(s.cachedMs)} ms`,
          `${m(s.restoredMs)} ms`,
          `${m(s.rebuiltMs, 0)} ms`,
          `${m(s.freshMs)} ms`,
          x(s.rebuiltVsRestored),
          x(s.restoredVsFresh),
        ]),
      ),
    );
  }
  if (r.embeddings?.length) {
    const e = r.embeddings[0];
    out.push(
      `\n**Embeddings** (our kernels, one thread, ${e.tokens}-token inputs; vectors per second, median of ${e.perSecond['1'].runs.length} runs; peers on the same weights and texts, ours ÷ theirs per run)\n`,
    );
    const rows = r.embeddings.flatMap((b) => [
      [`${b.model} ${b.dtype}`, 'ours', f(b.perSecond['1'].median, 1), f(b.perSecond['32'].median, 1), ''],
      ...(b.peers ?? []).map((p) => [
        `${b.model} ${b.dtype}`,
        p.name,
        `${f(p.perSecond['1'].median, 1)} (${f(p.ratio['1'].median, 2)}×)`,
        `${f(p.perSecond['32'].median, 1)} (${f(p.ratio['32'].median, 2)}×)`,
        f(p.minCosine, 6),
      ]),
    ]);
    out.push(table(['model', 'engine', 'batch 1', 'batch 32', 'least cosine to ours'], rows));
  }
  if (r.structured) {
    const st = r.structured;
    out.push(
      `\n**Structured outputs** (bench-135m fp32 on the ${st.backend} runner, ${st.streams} concurrent streams of ${st.tokens} tokens; ms per engine step)\n`,
    );
    out.push(
      table(
        ['free text', 'JSON schema', 'EBNF grammar', 'JSON ÷ free', 'grammar ÷ free'],
        [[f(st.stepMs.free, 1), f(st.stepMs.json, 1), f(st.stepMs.grammar, 1), x(st.ratio.json), x(st.ratio.grammar)]],
      ),
    );
    out.push(
      `\nGrammar compile (ms): first use with tokenizer info ${f(st.compileMs.first, 0)} (of which xgrammar's start ${f(st.compileMs.initMs, 0)}); ${Object.entries(
        st.compileMs.schemas,
      )
        .map(([k, v]) => `${k} ${f(v, 1)}`)
        .join('; ')}; a cache hit ${f(st.compileMs.cacheHit, 2)}.`,
    );
  }
  if (r.speculative) out.push(`\n${speculationTable('cpu', r.speculative)}`);
  if (r.speculativeKernels) out.push(`\n${speculationTable('edge kernels', r.speculativeKernels)}`);
  if (r.webgpu)
    out.push(
      `\n**WebGPU vs wasm** (tiny; on lavapipe, a CPU standing in for a GPU: dispatch overhead, not GPU speed)\n\n${webGpuBenchTable(r.webgpu)}`,
    );
  if (r.wllama) out.push(`\n${wllamaBenchTable(r.wllama)}`);
  if (r.kernels) out.push(`\n${kernelsTable(r.kernels)}`);
  if (r.edge) out.push(`\n${edgeTable(r.edge)}`);
  if (r.edgeMemory) out.push(`\n${edgeMemoryTable(r.edgeMemory)}`);
  if (r.stages) out.push(`\n${stagesTables(r.stages)}`);
  if (r.architectures) out.push(`\n${architecturesTable(r.architectures)}`);
  if (r.lora) out.push(`\n${loraTable(r.lora)}`);
  return `${out.join('\n')}\n`;
}

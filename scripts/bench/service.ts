// The service end to end: `wrangler dev` (workerd, the Durable Object, the engine on onnxruntime-web
// WASM) over HTTP with concurrent streaming clients, against the same engine alone in this process
// (onnxruntime-web WASM in Node; workerd's WASM runs as fast as Node's) with the service's settings.
// One shard, so both sides are one engine.
import { Engine } from '../../src/engine/engine.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { startDevServer } from '../../test/e2e/helpers/wrangler.js';
import { nodeRuntime } from '../lib/runtimes.js';
import { promptIds } from './engine-runs.js';
import { modelDir } from './models.js';
import { median, ratioByRun, sampled, type Sampled } from './stats.js';

/** The service in workerd against the Node engine, streaming, by concurrent clients (results.ts reports it). */
export interface ServiceResult {
  model: string;
  /** By concurrent streaming clients. */
  byClients: Record<
    string,
    {
      service: { tokPerS: Sampled; ttftMs: Sampled };
      engine: { tokPerS: Sampled; ttftMs: Sampled };
      serviceVsEngine: Sampled;
    }
  >;
}

export interface ClientRun {
  /** Completion tokens of all clients ÷ wall time from the first request to the last stream's end. */
  tokPerS: number;
  /** Median over clients of the time to their first token. */
  ttftMs: number;
}

/**
 * Each side's `run` once, one after another in `order`, by side: a pair of measurements seconds apart, so that this
 * host's changes of speed mostly fall between pairs (the edge section and edge-ab.ts alternate the order by round).
 */
export async function inTurn<S extends string, T>(
  order: readonly S[],
  run: (side: S) => Promise<T>,
): Promise<Record<S, T>> {
  const out = {} as Record<S, T>;
  for (const side of order) out[side] = await run(side);
  return out;
}

/**
 * One streamed completion over HTTP: time to the first chunk with text and to the last, and completion tokens
 * from usage.
 */
export async function streamOnce(
  url: string,
  prompt: number[],
  tokens: number,
): Promise<{ ttftMs: number; lastMs: number; completionTokens: number }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      prompt,
      max_tokens: tokens,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (!res.ok || !res.body) throw new Error(`service answered ${res.status}: ${await res.text()}`);
  let ttftMs = NaN;
  let lastMs = NaN;
  let completionTokens = -1;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(bytes, { stream: true });
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event
        .split('\n')
        .find((l) => l.startsWith('data: '))
        ?.slice(6);
      if (!data || data === '[DONE]') continue;
      const chunk = JSON.parse(data) as {
        choices: { text?: string }[];
        usage?: { completion_tokens: number };
        error?: unknown;
      };
      if (chunk.error) throw new Error(`stream error: ${JSON.stringify(chunk.error)}`);
      if (chunk.choices.length > 0) {
        lastMs = performance.now() - t0;
        if (Number.isNaN(ttftMs)) ttftMs = lastMs;
      }
      if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
    }
  }
  if (completionTokens !== tokens)
    throw new Error(`expected ${tokens} completion tokens, usage says ${completionTokens}`);
  return { ttftMs, lastMs, completionTokens };
}

export async function clients(
  n: number,
  one: (i: number) => Promise<{ ttftMs: number; completionTokens: number }>,
): Promise<ClientRun> {
  const t0 = performance.now();
  const all = await Promise.all(Array.from({ length: n }, (_, i) => one(i)));
  const tokens = all.reduce((a, r) => a + r.completionTokens, 0);
  return { tokPerS: (tokens * 1000) / (performance.now() - t0), ttftMs: median(all.map((r) => r.ttftMs)) };
}

export async function runService(
  clientCounts: number[],
  runs: number,
  tokens: number,
  promptTokens: number,
  log: (s: string) => void,
): Promise<ServiceResult> {
  // The service's defaults: KV_CACHE_MB 16, MAX_BATCH 16.
  const engine = await Engine.load(await nodeRuntime('wasm'), directorySource(modelDir('tiny')), {
    kvCacheBytes: 16 * 2 ** 20,
    maxBatchSize: 16,
  });
  const server = await startDevServer({ SHARD_COUNT: '1' });
  try {
    const vocab = engine.samplableVocab;
    const viaEngine = async (prompt: number[]) => {
      const t0 = performance.now();
      let ttftMs = NaN;
      let completionTokens = 0;
      for await (const e of engine.generate({
        prompt_ids: prompt,
        max_tokens: tokens,
        temperature: 0,
        ignore_eos: true,
      })) {
        if (e.type !== 'token') continue;
        if (completionTokens++ === 0) ttftMs = performance.now() - t0;
      }
      return { ttftMs, completionTokens };
    };
    const samples = new Map<string, number[]>();
    const add = (k: string, x: number) => samples.set(k, [...(samples.get(k) ?? []), x]);
    for (let run = -1; run < runs; run++) {
      for (const n of clientCounts) {
        const seed = 100 + run * 10 + n;
        // Alternate which side goes first, so neither always meets a warmer machine.
        const sides = [
          ['service', () => clients(n, (i) => streamOnce(server.url, promptIds(promptTokens, seed, i, vocab), tokens))],
          ['engine', () => clients(n, (i) => viaEngine(promptIds(promptTokens, seed + 1, i, vocab)))],
        ] as const;
        for (const [side, f] of run % 2 ? [...sides].reverse() : sides) {
          const r = await f();
          if (run < 0) continue;
          add(`${side}:${n}:tok`, r.tokPerS);
          add(`${side}:${n}:ttft`, r.ttftMs);
        }
      }
      if (run >= 0)
        log(
          `service: run ${run + 1}/${runs}: ${clientCounts.map((n) => `${n} clients ${samples.get(`service:${n}:tok`)!.at(-1)!.toFixed(0)} tok/s (engine ${samples.get(`engine:${n}:tok`)!.at(-1)!.toFixed(0)})`).join(', ')}`,
        );
    }
    const byClients: ServiceResult['byClients'] = {};
    for (const n of clientCounts) {
      const get = (k: string) => samples.get(k) ?? [];
      byClients[n] = {
        service: { tokPerS: sampled(get(`service:${n}:tok`)), ttftMs: sampled(get(`service:${n}:ttft`)) },
        engine: { tokPerS: sampled(get(`engine:${n}:tok`)), ttftMs: sampled(get(`engine:${n}:ttft`)) },
        serviceVsEngine: ratioByRun(get(`service:${n}:tok`), get(`engine:${n}:tok`)),
      };
    }
    return { model: 'tiny fp32 (wasm)', byClients };
  } finally {
    await server.stop();
    await engine.runner.release();
  }
}

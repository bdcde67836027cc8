// What the engine itself does, measured through its public API exactly as a host would use it.
import type { Engine } from '../../src/engine/engine.js';

/**
 * Token ids for a prompt: deterministic per (seed, stream), all distinct between seeds so no run
 * meets an earlier run's blocks in the prefix cache. Ids 3.. (0-2 are special) within what the
 * tokenizer knows.
 */
export function promptIds(length: number, seed: number, stream: number, vocab: number): number[] {
  const span = vocab - 3;
  let x = (seed * 2654435761 + stream * 40503 + 12345) >>> 0;
  return Array.from({ length }, () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return 3 + (x % span);
  });
}

export interface DecodeRun {
  /** Decode tokens per second over all sequences, from the step where every sequence has its first token. */
  aggregateTokPerS: number;
  /** Time to the first token of the first sequence. */
  ttftMs: number;
}

/** `batch` concurrent greedy sequences of `promptTokens` prompt tokens each generating `tokens`. */
export async function engineDecode(
  engine: Engine,
  batch: number,
  promptTokens: number,
  tokens: number,
  seed: number,
): Promise<DecodeRun> {
  const t0 = performance.now();
  const streams = Array.from({ length: batch }, (_, i) =>
    engine.generate({
      prompt_ids: promptIds(promptTokens, seed, i, engine.samplableVocab),
      max_tokens: tokens,
      temperature: 0,
      ignore_eos: true,
    }),
  );
  const firsts = await Promise.all(streams.map((s) => s.next()));
  const ttftMs = performance.now() - t0;
  if (firsts.some((f) => f.done || f.value.type !== 'token')) throw new Error('a stream ended before its first token');
  const t1 = performance.now();
  let generated = 0;
  await Promise.all(
    streams.map(async (s) => {
      for await (const event of s) if (event.type === 'token') generated++;
    }),
  );
  if (generated !== batch * (tokens - 1))
    throw new Error(`expected ${batch * (tokens - 1)} decode tokens, got ${generated}`);
  return { aggregateTokPerS: (generated * 1000) / (performance.now() - t1), ttftMs };
}

/** Time to first token of one fresh prompt of `length` tokens (its whole prefill, in the engine's chunks). */
export async function engineTtft(engine: Engine, length: number, seed: number): Promise<number> {
  const t0 = performance.now();
  const stream = engine.generate({
    prompt_ids: promptIds(length, seed, 0, engine.samplableVocab),
    max_tokens: 1,
    temperature: 0,
    ignore_eos: true,
  });
  const first = await stream.next();
  const ms = performance.now() - t0;
  if (first.done || first.value.type !== 'token') throw new Error('no first token');
  for await (const _ of stream) void _;
  return ms;
}

// A chain of responses against re-sending the history: `wrangler dev` serving `tiny`, one shard. Each turn of a
// 10-turn conversation is sent twice, streamed, with max 8 output tokens: as a response continuing the previous one
// (`previous_response_id`: only the new input is prefilled, from the chain's kept cache) and as a chat completion
// carrying the whole history (rendered and tokenised again; its full blocks found by the prefix cache), each way
// on a fresh server of its own. Timed: the
// first text delta of each (time to first token, as the client sees it), with the cached tokens each reported.
import { createParser } from 'eventsource-parser';
import { startDevServer } from '../../test/e2e/helpers/wrangler.js';
import type { ResponsesChainResult } from './results.js';
import { ratioByRun, sampled } from './stats.js';

const TURNS = 10;
const INSTRUCTIONS = 'You are a terse assistant. Answer in one short sentence.';
const WORDS = ['token', 'block', 'cache', 'prefix', 'turn', 'shard', 'isolate', 'kernel', 'grammar', 'session'];

/** Streams `body` to `path`; the time to the first event whose data `isText` picks, the text and the final data. */
async function stream(
  url: string,
  path: string,
  body: unknown,
  isText: (data: Record<string, unknown>) => string | undefined,
): Promise<{ ttftMs: number; text: string; last: Record<string, unknown>[] }> {
  const t0 = performance.now();
  const res = await fetch(`${url}${path}`, { method: 'POST', body: JSON.stringify(body) });
  if (!res.ok || !res.body) throw new Error(`service answered ${res.status}: ${await res.text()}`);
  let ttftMs = NaN;
  let text = '';
  const all: Record<string, unknown>[] = [];
  const parser = createParser({
    onEvent: (e) => {
      if (e.data === '[DONE]') return;
      const data = JSON.parse(e.data) as Record<string, unknown>;
      all.push(data);
      const piece = isText(data);
      if (piece !== undefined) {
        if (Number.isNaN(ttftMs)) ttftMs = performance.now() - t0;
        text += piece;
      }
    },
  });
  const decoder = new TextDecoder();
  const reader = res.body.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
    parser.feed(decoder.decode(chunk.value, { stream: true }));
  return { ttftMs, text, last: all };
}

export async function runResponsesChain(runs: number, log: (s: string) => void): Promise<ResponsesChainResult> {
  const chainMs: number[][] = Array.from({ length: TURNS }, () => []);
  const resendMs: number[][] = Array.from({ length: TURNS }, () => []);
  const chainCached: number[] = [];
  const resendCached: number[] = [];
  const inputTokens: number[] = [];
  const resendInputTokens: number[] = [];
  const inputs = (run: number): string[] =>
    WORDS.map((word, t) => `Run ${run}, question ${t}: what is a ${word}, and why does it matter here?`);
  // The answers of each run's chain, which its resend carries as the history.
  const answers = new Map<number, string[]>();
  // Each way on a server of its own, so neither finds the other's blocks in the prefix cache.
  let server = await startDevServer({ SHARD_COUNT: '1' });
  try {
    for (let run = -1; run < runs; run++) {
      let previous: string | undefined;
      const texts: string[] = [];
      for (const [t, input] of inputs(run).entries()) {
        const response = await stream(
          server.url,
          '/v1/responses',
          {
            model: 'tiny',
            input,
            instructions: INSTRUCTIONS,
            max_output_tokens: 8,
            temperature: 0,
            stream: true,
            ...(previous ? { previous_response_id: previous } : {}),
          },
          (d) => (d.type === 'response.output_text.delta' ? (d.delta as string) : undefined),
        );
        const completed = response.last.at(-1)!.response as {
          id: string;
          usage: { input_tokens: number; input_tokens_details: { cached_tokens: number } };
        };
        previous = completed.id;
        texts.push(response.text);
        if (run < 0) continue; // the first conversation warms the model and SQLite
        chainMs[t].push(response.ttftMs);
        if (run === 0) {
          chainCached.push(completed.usage.input_tokens_details.cached_tokens);
          inputTokens.push(completed.usage.input_tokens);
        }
      }
      answers.set(run, texts);
      log(`  responses chain: run ${run + 1}/${runs} done`);
    }
    await server.stop();
    server = await startDevServer({ SHARD_COUNT: '1' });
    for (let run = -1; run < runs; run++) {
      const history: { role: string; content: string }[] = [{ role: 'system', content: INSTRUCTIONS }];
      for (const [t, input] of inputs(run).entries()) {
        history.push({ role: 'user', content: input });
        const chat = await stream(
          server.url,
          '/v1/chat/completions',
          {
            model: 'tiny',
            messages: history,
            max_tokens: 8,
            temperature: 0,
            stream: true,
            stream_options: { include_usage: true },
          },
          (d) => {
            const delta = (d.choices as { delta: { content?: string } }[] | undefined)?.[0]?.delta;
            return delta?.content ? delta.content : undefined;
          },
        );
        history.push({ role: 'assistant', content: answers.get(run)![t] });
        if (run < 0) continue;
        resendMs[t].push(chat.ttftMs);
        if (run === 0) {
          const usage = chat.last.at(-1)!.usage as {
            prompt_tokens: number;
            prompt_tokens_details: { cached_tokens: number };
          };
          resendCached.push(usage.prompt_tokens_details.cached_tokens);
          resendInputTokens.push(usage.prompt_tokens);
        }
      }
      log(`  resent history: run ${run + 1}/${runs} done`);
    }
  } finally {
    await server.stop();
  }
  return {
    model: 'tiny',
    byTurn: chainMs.map((c, t) => ({
      turn: t + 1,
      inputTokens: inputTokens[t],
      resendInputTokens: resendInputTokens[t],
      chainCached: chainCached[t],
      resendCached: resendCached[t],
      chainTtftMs: sampled(c),
      resendTtftMs: sampled(resendMs[t]),
      resendVsChain: ratioByRun(resendMs[t], c),
    })),
  };
}

import type { FinishReason } from '../engine/sequence-output.js';
import type { WireEvent, WireLogprob } from '../objects/generation-run.js';
import { ApiError } from './errors.js';
import type { DoneWire, TokenWire } from './generation-stream.js';
import { ReasoningSplitter, splitReasoning, type ReasoningFormat } from '../responses/reasoning.js';
import { parseToolCalls, ToolCallParser } from './tool-calls.js';

/** OpenAI response shapes, built from the object's events. Field order follows OpenAI's own responses. */

export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
}

export function responseMeta(prefix: 'chatcmpl' | 'cmpl', model: string): ResponseMeta {
  const random = [...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, '0')).join('');
  return { id: `${prefix}-${random}`, created: Math.floor(Date.now() / 1000), model };
}

/** The engine's 'cancelled' only reaches a client that is already gone; 'stop' and 'length' map as they are. */
export const finishReason = (reason: FinishReason): 'stop' | 'length' => (reason === 'length' ? 'length' : 'stop');

/** As OpenAI: a completion that ended by itself after making tool calls finishes with `tool_calls`. */
const chatFinish = (reason: FinishReason, calls: number): 'stop' | 'length' | 'tool_calls' =>
  calls > 0 && reason !== 'length' ? 'tool_calls' : finishReason(reason);

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/**
 * Usage over all choices: each prompt counts once (its first choice's numbers, as OpenAI bills `n`),
 * completions count for every choice.
 */
export function usage(done: DoneWire[], n: number): Usage {
  let prompt = 0;
  let cached = 0;
  let completion = 0;
  done.forEach((d, i) => {
    completion += d.metrics.completionTokens;
    if (i % n === 0) {
      prompt += d.metrics.promptTokens;
      cached += d.metrics.cachedTokens;
    }
  });
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached },
  };
}

/** A beam search choice's rank score and summed log-probability (beside OpenAI's fields, as vLLM reports them). */
const beamFields = (d: DoneWire): { beam_score?: number; cumulative_logprob?: number } =>
  d.beam ? { beam_score: d.beam.score, cumulative_logprob: d.beam.cumulativeLogprob } : {};

// ---- chat ----

export interface ChatLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

const plain = ({ token, logprob, bytes }: WireLogprob) => ({ token, logprob, bytes });

export function chatLogprobs(tokens: TokenWire[]): { content: ChatLogprob[]; refusal: null } {
  const content = tokens.flatMap((t) =>
    t.logprob ? [{ ...plain(t.logprob), top_logprobs: t.logprob.top.map(plain) }] : [],
  );
  return { content, refusal: null };
}

export function chatCompletion(
  meta: ResponseMeta,
  tokens: TokenWire[][],
  done: DoneWire[],
  n: number,
  logprobs: boolean,
  parseTools = false,
  reasoningFormat?: ReasoningFormat,
) {
  return {
    id: meta.id,
    object: 'chat.completion' as const,
    created: meta.created,
    model: meta.model,
    choices: done.map((d, index) => {
      // Reasoning first (it comes before the answer), then the answer's tool calls.
      const { reasoning, content: answer } = splitReasoning(reasoningFormat, d.text);
      const { content, calls } = parseTools ? parseToolCalls(answer) : { content: answer, calls: [] };
      const thought = reasoning !== undefined ? { reasoning_content: reasoning } : {};
      const message =
        calls.length > 0
          ? { role: 'assistant' as const, content: content || null, ...thought, refusal: null, tool_calls: calls }
          : { role: 'assistant' as const, content, ...thought, refusal: null };
      return {
        index,
        message,
        logprobs: logprobs ? chatLogprobs(tokens[index]) : null,
        finish_reason: chatFinish(d.finishReason, calls.length),
        ...beamFields(d),
      };
    }),
    usage: usage(done, n),
    system_fingerprint: null,
  };
}

export function chatChunk(meta: ResponseMeta, choices: unknown[], extra: Record<string, unknown> = {}) {
  return {
    id: meta.id,
    object: 'chat.completion.chunk' as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
    choices,
    ...extra,
  };
}

/** chat.completion.chunk events: a role chunk per choice, content deltas, a finish chunk per choice, then usage if asked. */
export async function* chatChunks(
  events: AsyncIterable<WireEvent>,
  meta: ResponseMeta,
  count: number,
  n: number,
  includeUsage: boolean,
  logprobs: boolean,
  parseTools = false,
  reasoningFormat?: ReasoningFormat,
) {
  const extra = includeUsage ? { usage: null } : {};
  // Reasoning streams as `delta.reasoning_content` (vLLM's and DeepSeek's spelling), the answer as `delta.content`.
  const splitters = Array.from({ length: count }, () => new ReasoningSplitter(reasoningFormat));
  // Tool calls stream as OpenAI streams them: per call, a delta with index, id, type and name, then fragments of arguments.
  const parsers = parseTools ? Array.from({ length: count }, () => new ToolCallParser()) : [];
  for (let index = 0; index < count; index++) {
    yield chatChunk(
      meta,
      [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
      extra,
    );
  }
  const done: DoneWire[] = [];
  for await (const event of events) {
    if (event.type === 'error') throw ApiError.from(event.error);
    if (event.type === 'token') {
      const lp = logprobs ? chatLogprobs([event]) : null;
      const parser = parsers[event.index];
      const split = splitters[event.index].push(event.text);
      if (split.reasoning !== '')
        yield chatChunk(
          meta,
          [{ index: event.index, delta: { reasoning_content: split.reasoning }, logprobs: null, finish_reason: null }],
          extra,
        );
      const { content, deltas } = parser ? parser.push(split.content) : { content: split.content, deltas: [] };
      if (content !== '' || (logprobs && event.logprob))
        yield chatChunk(meta, [{ index: event.index, delta: { content }, logprobs: lp, finish_reason: null }], extra);
      for (const call of deltas)
        yield chatChunk(
          meta,
          [{ index: event.index, delta: { tool_calls: [call] }, logprobs: null, finish_reason: null }],
          extra,
        );
    } else {
      done[event.index] = event;
      const parser = parsers[event.index];
      const held = splitters[event.index].flush();
      if (held.reasoning !== '')
        yield chatChunk(
          meta,
          [{ index: event.index, delta: { reasoning_content: held.reasoning }, logprobs: null, finish_reason: null }],
          extra,
        );
      const fromSplit = parser ? parser.push(held.content) : { content: held.content, deltas: [] };
      for (const call of fromSplit.deltas)
        yield chatChunk(
          meta,
          [{ index: event.index, delta: { tool_calls: [call] }, logprobs: null, finish_reason: null }],
          extra,
        );
      const rest = fromSplit.content + (parser?.flush() ?? '');
      if (rest !== '')
        yield chatChunk(
          meta,
          [{ index: event.index, delta: { content: rest }, logprobs: null, finish_reason: null }],
          extra,
        );
      yield chatChunk(
        meta,
        [
          {
            index: event.index,
            delta: {},
            logprobs: null,
            finish_reason: chatFinish(event.finishReason, parser?.calls.length ?? 0),
          },
        ],
        extra,
      );
    }
  }
  if (includeUsage) yield chatChunk(meta, [], { usage: usage(done, n) });
}

// ---- completions (legacy logprobs) ----

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Array<Record<string, number>>;
  text_offset: number[];
}

/** Legacy logprobs; text_offset is where each token's visible text starts in the completion text. */
export function completionLogprobs(tokens: TokenWire[], startOffset = 0): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let offset = startOffset;
  for (const t of tokens) {
    if (t.logprob) {
      out.tokens.push(t.logprob.token);
      out.token_logprobs.push(t.logprob.logprob);
      out.top_logprobs.push(Object.fromEntries(t.logprob.top.map((a) => [a.token, a.logprob])));
      out.text_offset.push(offset);
    }
    offset += t.text.length;
  }
  return out;
}

/** vLLM's prompt_logprobs: per prompt token (the first: null), {id: {logprob, rank, decoded_token}} for it and its alternatives. */
export function promptLogprobsField(done: DoneWire): { prompt_logprobs?: unknown[] } {
  if (!done.promptLogprobs) return {};
  return {
    prompt_logprobs: done.promptLogprobs.map((p) => {
      if (!p) return null;
      const entries: Record<string, { logprob: number; rank: number | null; decoded_token: string }> = {};
      for (const [i, t] of p.top.entries())
        entries[t.tokenId] = { logprob: t.logprob, rank: i + 1, decoded_token: t.token };
      entries[p.tokenId] = { logprob: p.logprob, rank: p.rank, decoded_token: p.token };
      return entries;
    }),
  };
}

export function textCompletion(
  meta: ResponseMeta,
  tokens: TokenWire[][],
  done: DoneWire[],
  n: number,
  logprobs: boolean,
) {
  return {
    id: meta.id,
    object: 'text_completion' as const,
    created: meta.created,
    model: meta.model,
    choices: done.map((d, index) => ({
      index,
      text: d.text,
      logprobs: logprobs ? completionLogprobs(tokens[index]) : null,
      finish_reason: finishReason(d.finishReason),
      ...beamFields(d),
      ...promptLogprobsField(d),
    })),
    usage: usage(done, n),
    system_fingerprint: null,
  };
}

export function completionChunk(meta: ResponseMeta, choices: unknown[], extra: Record<string, unknown> = {}) {
  return {
    id: meta.id,
    object: 'text_completion' as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
    choices,
    ...extra,
  };
}

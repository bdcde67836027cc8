import { Hono } from 'hono';
import type { ChatMessage, GenerationRequest } from '../../engine/request.js';
import type { Env } from '../../env.js';
import { readJsonObject } from '../body.js';
import { ApiError, badParam } from '../errors.js';
import { collect, startGeneration, type DoneWire, type Generation } from '../generation.js';
import { chatChunk, chatCompletion, chatLogprobs, finishReason, responseMeta, usage, type ResponseMeta } from '../openai.js';
import { checkModel, chatMessages, choiceCount, optBoolean, optInteger, refuseUnsupported, samplingParams, streamOptions } from '../params.js';
import { shardForPrompt } from '../routing.js';
import { sseResponse } from '../sse.js';

/** POST /v1/chat/completions */
const chat = new Hono<{ Bindings: Env }>();

chat.post('/', async (c) => {
  const body = await readJsonObject(c);
  const model = checkModel(body, c.env);
  refuseUnsupported(body, ['tools', 'tool_choice', 'functions', 'function_call', 'audio', 'prediction']);
  const format = body.response_format as { type?: unknown } | null | undefined;
  if (format != null && format.type !== 'text') throw badParam('response_format', 'only response_format {"type":"text"} is supported', 'unsupported_parameter');

  const messages = chatMessages(body);
  const n = choiceCount(body);
  const { stream, includeUsage } = streamOptions(body);
  const logprobs = optBoolean(body, 'logprobs') ?? false;
  const topLogprobs = optInteger(body, 'top_logprobs');
  if (topLogprobs !== undefined && !logprobs) throw badParam('top_logprobs', 'top_logprobs requires logprobs: true', 'invalid_value');
  const sampling = samplingParams(body);
  const maxCompletionTokens = optInteger(body, 'max_completion_tokens');
  if (maxCompletionTokens !== undefined) sampling.max_tokens = maxCompletionTokens;

  const request: GenerationRequest = { messages, ...sampling, ...(logprobs ? { logprobs: true, top_logprobs: topLogprobs ?? 0 } : {}) };
  // n completions of one prompt: the engine prefills it once and forks the cache (seeds seed, seed + 1, ...).
  const generation = await startGeneration(c.env, shardForPrompt(c.env, routingText(messages)), [{ ...request, n }], c.req.raw.signal);
  const meta = responseMeta('chatcmpl', model);

  if (stream) return sseResponse(chatChunks(generation, meta, n, n, includeUsage, logprobs), generation.cancel);
  const { tokens, done } = await collect(generation, n);
  return c.json(chatCompletion(meta, tokens, done, n, logprobs));
});

/** What picks the shard: the conversation's start, so a shared system prompt meets its cached blocks. */
function routingText(messages: ChatMessage[]): string {
  return messages.map((m) => `${m.role}\n${m.content}`).join('\n');
}

/** chat.completion.chunk events: a role chunk per choice, content deltas, a finish chunk per choice, then usage. */
async function* chatChunks(generation: Generation, meta: ResponseMeta, count: number, n: number, includeUsage: boolean, logprobs: boolean) {
  const extra = includeUsage ? { usage: null } : {};
  for (let index = 0; index < count; index++) {
    yield chatChunk(meta, [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], extra);
  }
  const done: DoneWire[] = [];
  for await (const event of generation.events) {
    if (event.type === 'error') throw ApiError.from(event.error);
    if (event.type === 'token') {
      if (event.text === '' && !(logprobs && event.logprob)) continue;
      const lp = logprobs ? chatLogprobs([event]) : null;
      yield chatChunk(meta, [{ index: event.index, delta: { content: event.text }, logprobs: lp, finish_reason: null }], extra);
    } else {
      done[event.index] = event;
      yield chatChunk(meta, [{ index: event.index, delta: {}, logprobs: null, finish_reason: finishReason(event.finishReason) }], extra);
    }
  }
  if (includeUsage) yield chatChunk(meta, [], { usage: usage(done, n) });
}

export default chat;

import { Hono } from 'hono';
import type { JsonValue } from '../../engine/constraints/spec.js';
import type { ChatMessage, GenerationRequest } from '../../engine/request.js';
import type { AppEnv } from '../app-env.js';
import { badParam } from '../errors.js';
import { withRequestWhitespace } from '../structured.js';
import { toolUse } from '../tools.js';
import { chatChunks, chatCompletion, responseMeta } from '../openai.js';
import { chatMessages, choiceCount, optBoolean, optInteger, samplingParams, streamOptions } from '../request-params.js';
import { collectedAnswer, readGenerationBody, startOnPromptShard, streamedAnswer } from './generation-route.js';

/** POST /v1/chat/completions */
const chat = new Hono<AppEnv>();

chat.post('/', async (c) => {
  const { body, model, adapter } = await readGenerationBody(c, ['functions', 'function_call', 'audio', 'prediction']);
  const tools = toolUse(body);

  const messages = chatMessages(body);
  const n = choiceCount(body, c.env);
  const { stream, includeUsage } = streamOptions(body);
  const logprobs = optBoolean(body, 'logprobs') ?? false;
  const topLogprobs = optInteger(body, 'top_logprobs');
  if (topLogprobs !== undefined && !logprobs)
    throw badParam('top_logprobs', 'top_logprobs requires logprobs: true', 'invalid_value');
  const sampling = samplingParams(body);
  if (sampling.constraint && tools.constraint)
    throw badParam(
      'tool_choice',
      `a forced tool call cannot be combined with ${sampling.constraint.param}`,
      'invalid_value',
    );
  const constraint = sampling.constraint ?? withRequestWhitespace(tools.constraint, body);
  const maxCompletionTokens = optInteger(body, 'max_completion_tokens');
  if (maxCompletionTokens !== undefined) sampling.max_tokens = maxCompletionTokens;
  // Extra variables for the chat template (vLLM's field): `{"enable_thinking": false}` for Qwen3.
  const kwargs = body.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && (typeof kwargs !== 'object' || Array.isArray(kwargs)))
    throw badParam('chat_template_kwargs', 'chat_template_kwargs must be an object');

  const request: GenerationRequest = {
    messages,
    ...sampling,
    ...(logprobs ? { logprobs: true, top_logprobs: topLogprobs ?? 0 } : {}),
    ...(constraint ? { constraint } : {}),
    ...(tools.tools ? { tools: tools.tools } : {}),
    ...(kwargs ? { chat_template_kwargs: kwargs as Record<string, JsonValue> } : {}),
  };
  // n completions of one prompt: the engine prefills it once and forks the cache (seeds seed, seed + 1, ...).
  const generation = await startOnPromptShard(c, routingText(messages), [
    { ...request, n, ...(adapter ? { adapter } : {}) },
  ]);
  const meta = responseMeta('chatcmpl', model);

  if (stream)
    return streamedAnswer(
      generation,
      chatChunks(generation.events, meta, n, n, includeUsage, logprobs, tools.parse, generation.reasoning),
    );
  return collectedAnswer(c, generation, n, ({ tokens, done }) =>
    chatCompletion(meta, tokens, done, n, logprobs, tools.parse, generation.reasoning),
  );
});

/** What picks the shard: the conversation's start, so a shared system prompt meets its cached blocks. */
function routingText(messages: ChatMessage[]): string {
  return messages.map((m) => `${m.role}\n${m.content ?? ''}`).join('\n');
}

export default chat;

import { Hono } from 'hono';
import type { Env } from '../../env.js';
import type { AppEnv } from '../app-env.js';
import type { SamplingFields } from '../../objects/sessions.js';
import { readJsonObject, type JsonObject } from '../body.js';
import { ApiError, badParam, unwrap } from '../errors.js';
import { chatChunks, chatLogprobs, finishReason, responseMeta, usage } from '../openai.js';
import { shardLimits } from '../limits.js';
import { logprobParams } from '../logprob-params.js';
import type { TokenWire } from '../generation-stream.js';
import {
  checkModel,
  checkModelOrAdapter,
  optInteger,
  optString,
  samplingParams,
  streamOptions,
} from '../request-params.js';
import { hash32, shardCount, shardStub } from '../routing.js';
import { issuedShard, issueId } from '../shard-ids.js';
import { openGeneration } from '../generation-stream.js';
import { rateLimitHeaders, withRateLimitHeaders } from '../rate-limit-headers.js';
import { sseResponse } from '../sse.js';
import { contentText } from '../../tokenizer/chat-messages.js';

/**
 * Chat sessions: POST /v1/sessions, GET|DELETE /v1/sessions/:id, POST /v1/sessions/:id/messages.
 * A session lives on the shard its id names, next to its KV cache, and belongs to the key that made it:
 * to any other key it does not exist (404).
 */
const sessions = new Hono<AppEnv>();

/** Sampling fields a session keeps as defaults and a message may override. */
export const SAMPLING_FIELDS = [
  'max_tokens',
  'max_completion_tokens',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'frequency_penalty',
  'presence_penalty',
  'repetition_penalty',
  'seed',
  'stop',
  'stop_token_ids',
  'ignore_eos',
  'logit_bias',
  // Structured outputs (docs/structured-outputs.md): a session default or one turn's constraint.
  'response_format',
  'structured_outputs',
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
];

/** Sampling fields of `body` (type-checked), refusing any field not in `allowed`: a typo should not pass silently. */
export function sessionSampling(body: JsonObject, allowed: string[], where = ''): SamplingFields {
  for (const key of Object.keys(body)) {
    if (!allowed.includes(key))
      throw badParam(`${where}${key}`, `unknown parameter '${where}${key}'`, 'unknown_parameter');
  }
  try {
    const sampling: SamplingFields = samplingParams(body);
    const maxCompletionTokens = optInteger(body, 'max_completion_tokens');
    if (maxCompletionTokens !== undefined) sampling.max_tokens = maxCompletionTokens;
    return sampling;
  } catch (err) {
    // A nested field is named by its path (defaults.temperature), as the unknown ones above are.
    if (err instanceof ApiError && where)
      throw new ApiError(err.status, err.message, err.type, `${where}${err.param ?? ''}`, err.code);
    throw err;
  }
}

async function shardFor(env: Env, id: string): Promise<number> {
  const shard = await issuedShard(env, id);
  if (shard === null) throw new ApiError(404, `no session '${id}'`, 'invalid_request_error', null, 'session_not_found');
  return shard;
}

const stubFor = async (env: Env, id: string) => shardStub(env, await shardFor(env, id));

sessions.post('/', async (c) => {
  const body = await readJsonObject(c);
  for (const key of Object.keys(body)) {
    if (!['system', 'model', 'defaults'].includes(key))
      throw badParam(key, `unknown parameter '${key}'`, 'unknown_parameter');
  }
  // `model` may name one of the model's LoRA adapters: every turn of the session runs on it.
  const { adapter } = checkModelOrAdapter(body, c.env);
  const system = optString(body, 'system');
  const given = body.defaults ?? {};
  if (typeof given !== 'object' || given === null || Array.isArray(given))
    throw badParam('defaults', 'defaults must be an object of sampling parameters');
  const sampling = sessionSampling(given as JsonObject, SAMPLING_FIELDS, 'defaults.');
  const defaults = adapter ? { ...sampling, adapter } : sampling;
  // Sessions with the same system prompt share a shard, and so its cached blocks; the rest spread out.
  const shard =
    system !== undefined
      ? hash32(`system\n${system}`) % shardCount(c.env)
      : Math.floor(Math.random() * shardCount(c.env));
  const session = unwrap(
    await shardStub(c.env, shard).createSession(
      await issueId(c.env, shard),
      c.get('tenant'),
      { system, defaults },
      shardLimits(c.env, shard),
    ),
  );
  return c.json(session, 201);
});

sessions.get('/:id', async (c) =>
  c.json(unwrap(await (await stubFor(c.env, c.req.param('id'))).getSession(c.req.param('id'), c.get('tenant')))),
);

sessions.delete('/:id', async (c) =>
  c.json(unwrap(await (await stubFor(c.env, c.req.param('id'))).deleteSession(c.req.param('id'), c.get('tenant')))),
);

sessions.post('/:id/messages', async (c) => {
  const id = c.req.param('id');
  const shard = await shardFor(c.env, id);
  const stub = shardStub(c.env, shard);
  const body = await readJsonObject(c);
  const content = messageContent(body.content);
  const rest = Object.fromEntries(
    Object.entries(body).filter(
      ([k]) => !['content', 'stream', 'stream_options', 'logprobs', 'top_logprobs'].includes(k),
    ),
  );
  // logprobs belong to one reply, so they are a message's field and never a session default.
  const { logprobs, fields } = logprobParams(body);
  const overrides = { ...sessionSampling(rest, SAMPLING_FIELDS), ...fields };
  const { stream, includeUsage } = streamOptions(body);
  const model = checkModel({}, c.env);

  const caller = { tenant: c.get('tenant'), limits: shardLimits(c.env, shard) };
  const { events, cancel, rateLimit } = await openGeneration(
    (channel) => stub.sessionMessage(id, content, overrides, channel, caller),
    c.req.raw.signal,
  );
  const meta = responseMeta('chatcmpl', model);
  if (stream)
    return withRateLimitHeaders(sseResponse(chatChunks(events, meta, 1, 1, includeUsage, logprobs), cancel), rateLimit);

  const tokens: TokenWire[] = [];
  for await (const event of events) {
    if (event.type === 'error') throw ApiError.from(event.error);
    if (event.type === 'token') tokens.push(event);
    if (event.type === 'done') {
      return c.json(
        {
          id: meta.id,
          object: 'session.message',
          session_id: id,
          created: meta.created,
          model,
          message: { role: 'assistant', content: event.text },
          ...(logprobs ? { logprobs: chatLogprobs(tokens) } : {}),
          finish_reason: finishReason(event.finishReason),
          usage: usage([event], 1),
        },
        200,
        rateLimitHeaders(rateLimit),
      );
    }
  }
  throw new ApiError(500, 'the reply ended before it finished', 'server_error', null, 'generation_failed');
});

/** The user message: a non-empty string, or OpenAI text parts (read as chat messages' are: chat-messages.ts). */
function messageContent(v: unknown): string {
  if (v === undefined) throw badParam('content', 'content is required');
  if ((typeof v === 'string' || Array.isArray(v)) && v.length === 0)
    throw badParam('content', 'content must not be empty', 'invalid_value');
  return contentText(v, 'content');
}

export default sessions;

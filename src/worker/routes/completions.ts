import { Hono } from 'hono';
import type { GenerationRequest } from '../../engine/request.js';
import type { AppEnv } from '../app-env.js';
import { ApiError, badParam } from '../errors.js';
import type { DoneWire, Generation } from '../generation-stream.js';
import {
  completionChunk,
  completionLogprobs,
  finishReason,
  promptLogprobsField,
  responseMeta,
  textCompletion,
  usage,
  type ResponseMeta,
} from '../openai.js';
import {
  MAX_CHOICES,
  choiceCount,
  completionPrompts,
  optBoolean,
  optInteger,
  samplingParams,
  streamOptions,
} from '../request-params.js';
import { collectedAnswer, readGenerationBody, startOnPromptShard, streamedAnswer } from './generation-route.js';

/** POST /v1/completions (legacy text completions). */
const completions = new Hono<AppEnv>();

completions.post('/', async (c) => {
  const { body, model, adapter } = await readGenerationBody(c, ['suffix']);
  if (optBoolean(body, 'echo'))
    throw badParam('echo', 'echo is not supported by this service', 'unsupported_parameter');

  const prompts = completionPrompts(body);
  const n = choiceCount(body, c.env);
  if (prompts.length * n > MAX_CHOICES)
    throw badParam('n', `prompts × n must be at most ${MAX_CHOICES}`, 'invalid_value');
  const { stream, includeUsage } = streamOptions(body);
  // Legacy logprobs: an integer, the number of alternatives per token (0 = just the chosen token's).
  const logprobs = optInteger(body, 'logprobs');
  const sampling = samplingParams(body);
  const promptLogprobs = body.prompt_logprobs;

  // Each prompt's n completions come from one prefill and copy-on-write forks of its cache.
  const requests = prompts.map(
    (p): GenerationRequest => ({
      ...p,
      ...sampling,
      n,
      ...(adapter ? { adapter } : {}),
      ...(logprobs !== undefined ? { logprobs: true, top_logprobs: logprobs } : {}),
      ...(promptLogprobs !== undefined && promptLogprobs !== null ? { prompt_logprobs: promptLogprobs as number } : {}),
    }),
  );
  const choices = requests.length * n;
  const first = prompts[0];
  const routingText = first.prompt ?? first.prompt_ids!.join(',');
  const generation = await startOnPromptShard(c, routingText, requests).catch((err: unknown) => {
    // The engine knows this parameter as top_logprobs; here it is called logprobs.
    if (err instanceof ApiError && err.param === 'top_logprobs')
      throw new ApiError(
        err.status,
        err.message.replaceAll('top_logprobs', 'logprobs'),
        err.type,
        'logprobs',
        err.code,
        err.headers,
      );
    throw err;
  });
  const meta = responseMeta('cmpl', model);

  if (stream)
    return streamedAnswer(
      generation,
      completionChunks(generation, meta, choices, n, includeUsage, logprobs !== undefined),
    );
  return collectedAnswer(c, generation, choices, ({ tokens, done }) =>
    textCompletion(meta, tokens, done, n, logprobs !== undefined),
  );
});

/** text_completion chunks: text deltas per choice, a finish chunk per choice, then usage if asked. */
async function* completionChunks(
  generation: Generation,
  meta: ResponseMeta,
  count: number,
  n: number,
  includeUsage: boolean,
  logprobs: boolean,
) {
  const extra = includeUsage ? { usage: null } : {};
  const offsets = new Array<number>(count).fill(0);
  const done: DoneWire[] = [];
  for await (const event of generation.events) {
    if (event.type === 'error') throw ApiError.from(event.error);
    if (event.type === 'token') {
      const lp = logprobs ? completionLogprobs([event], offsets[event.index]) : null;
      offsets[event.index] += event.text.length;
      if (event.text === '' && !lp) continue;
      yield completionChunk(meta, [{ index: event.index, text: event.text, logprobs: lp, finish_reason: null }], extra);
    } else {
      done[event.index] = event;
      yield completionChunk(
        meta,
        [
          {
            index: event.index,
            text: '',
            logprobs: null,
            finish_reason: finishReason(event.finishReason),
            ...promptLogprobsField(event),
          },
        ],
        extra,
      );
    }
  }
  if (includeUsage) yield completionChunk(meta, [], { usage: usage(done, n) });
}

export default completions;

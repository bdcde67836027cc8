import { Hono } from 'hono';
import { intVar } from '../../env.js';
import type { EmbeddingInput } from '../../objects/embeddings.js';
import type { AppEnv } from '../app-env.js';
import { readJsonObject } from '../body.js';
import { badParam, unwrap } from '../errors.js';
import { shardLimits } from '../limits.js';
import { rateLimitHeaders } from '../rate-limit-headers.js';
import { checkModel } from '../request-params.js';
import { shardForPrompt, shardStub } from '../routing.js';

const isTokenId = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const SHAPE = 'input must be a string, an array of strings, an array of token ids, or an array of arrays of token ids';

/** OpenAI's `input`, as a list of inputs: text or token ids; each non-empty, at most `max` of them. */
function embeddingInputs(input: unknown, max: number): EmbeddingInput[] {
  let inputs: EmbeddingInput[];
  if (typeof input === 'string') inputs = [input];
  else if (!Array.isArray(input) || input.length === 0)
    throw badParam('input', input === undefined ? 'input is required' : `${SHAPE}, and not empty`);
  else if (input.every((v) => typeof v === 'string')) inputs = input as string[];
  else if (input.every(isTokenId)) inputs = [input as number[]];
  else if (input.every((v) => Array.isArray(v) && v.every(isTokenId))) inputs = input as number[][];
  else throw badParam('input', SHAPE);
  const empty = inputs.findIndex((v) => v.length === 0);
  if (empty >= 0)
    throw badParam(inputs.length === 1 ? 'input' : `input[${empty}]`, 'an input must not be empty', 'invalid_value');
  if (inputs.length > max)
    throw badParam(
      'input',
      `${inputs.length} inputs; at most ${max} are taken per request (EMBEDDINGS_MAX_INPUTS)`,
      'invalid_value',
    );
  return inputs;
}

/**
 * POST /v1/embeddings in OpenAI's shape: a vector per input (float, or base64 of its little-endian float32
 * bytes, what the official clients ask for), pooled as the model declares, on the shard a completion of the
 * first input would go to. Each input is a prefill-only request in that shard's batch.
 */
const embeddings = new Hono<AppEnv>();

embeddings.post('/', async (c) => {
  const body = await readJsonObject(c);
  const model = checkModel(body, c.env);
  const inputs = embeddingInputs(body.input, intVar(c.env, 'EMBEDDINGS_MAX_INPUTS'));
  const format = body.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64')
    throw badParam('encoding_format', "encoding_format must be 'float' or 'base64'", 'invalid_value');
  const dimensions = body.dimensions ?? undefined;
  if (
    dimensions !== undefined &&
    (typeof dimensions !== 'number' || !Number.isSafeInteger(dimensions) || dimensions < 1)
  )
    throw badParam('dimensions', 'dimensions must be a positive integer', 'invalid_value');
  const first = inputs[0];
  const shard = shardForPrompt(c.env, typeof first === 'string' ? first : first.join(','));
  const caller = { tenant: c.get('tenant'), limits: shardLimits(c.env, shard) };
  const options = { dimensions, maxInputTokens: intVar(c.env, 'EMBEDDINGS_MAX_INPUT_TOKENS') };
  const result = unwrap(await shardStub(c.env, shard).embeddings(inputs, options, caller));
  const data = result.vectors.map((v, index) => ({
    object: 'embedding',
    index,
    embedding: format === 'base64' ? base64(v) : Array.from(v),
  }));
  const usage = { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens };
  return c.json({ object: 'list', data, model, usage }, 200, rateLimitHeaders(result.rateLimit));
});

/** A vector's float32 bytes, little-endian (as numpy's frombuffer and the openai clients read them), in base64. */
function base64(v: Float32Array): string {
  const bytes = new Uint8Array(v.length * 4);
  const view = new DataView(bytes.buffer);
  for (const [i, x] of v.entries()) view.setFloat32(i * 4, x, true);
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

export default embeddings;

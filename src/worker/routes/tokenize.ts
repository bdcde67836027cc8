import { Hono } from 'hono';
import type { AppEnv } from '../app-env.js';
import { readJsonObject } from '../body.js';
import { badParam, unwrap } from '../errors.js';
import { checkModel, optBoolean, refuseUnsupported } from '../request-params.js';
import { shardForPrompt, shardStub } from '../routing.js';

/**
 * vLLM's POST /tokenize and POST /detokenize: {"prompt": "..."} → {"tokens": [...], "count", "max_model_len"}
 * (add_special_tokens, default true, as a completion prompt is encoded), and {"tokens": [...]} → {"prompt": "..."}.
 * A shard answers with its loaded tokenizer: the prompt goes where a completion of it would.
 */
const tokenize = new Hono<AppEnv>();

tokenize.post('/tokenize', async (c) => {
  const body = await readJsonObject(c);
  checkModel(body, c.env);
  refuseUnsupported(body, ['messages']);
  const prompt = body.prompt;
  if (typeof prompt !== 'string') throw badParam('prompt', 'prompt must be a string');
  const special = optBoolean(body, 'add_special_tokens') ?? true;
  return c.json(unwrap(await shardStub(c.env, shardForPrompt(c.env, prompt)).tokenize(prompt, special)));
});

tokenize.post('/detokenize', async (c) => {
  const body = await readJsonObject(c);
  checkModel(body, c.env);
  const tokens = body.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => typeof t === 'number' && Number.isSafeInteger(t) && t >= 0))
    throw badParam('tokens', 'tokens must be an array of token ids (non-negative integers)');
  return c.json(unwrap(await shardStub(c.env, 0).detokenize(tokens as number[])));
});

export default tokenize;

import { isAdapterName } from '../engine/adapters/lora-adapter.js';
import type { ChatMessage, GenerationRequest } from '../engine/request.js';
import { intVar, modelName, type Env } from '../env.js';
import { validateMessages } from '../tokenizer/chat-messages.js';
import type { JsonObject } from './body.js';
import { ApiError, badParam } from './errors.js';
import { structuredConstraint } from './structured.js';

/**
 * JSON type checks at the edge: a field of the wrong type or shape is a 400 naming it, before any RPC.
 * Ranges and values (top_p in (0, 1], max_tokens against the context window, ...) are the engine's to
 * check; it names the parameter too. `null` means "not given", as in OpenAI's API.
 */

/** Choices per request at most (`n` × prompts): each is a sequence in the batch. */
export const MAX_CHOICES = 64;

const kind = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
const present = (body: JsonObject, name: string): boolean => body[name] !== undefined && body[name] !== null;

export function optNumber(body: JsonObject, name: string): number | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (typeof v !== 'number') throw badParam(name, `${name} must be a number, got ${kind(v)}`);
  return v;
}

export function optInteger(body: JsonObject, name: string): number | undefined {
  const v = optNumber(body, name);
  if (v !== undefined && !Number.isSafeInteger(v)) throw badParam(name, `${name} must be an integer, got ${v}`);
  return v;
}

export function optBoolean(body: JsonObject, name: string): boolean | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (typeof v !== 'boolean') throw badParam(name, `${name} must be a boolean, got ${kind(v)}`);
  return v;
}

export function optString(body: JsonObject, name: string): string | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (typeof v !== 'string') throw badParam(name, `${name} must be a string, got ${kind(v)}`);
  return v;
}

function optObject(body: JsonObject, name: string): JsonObject | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (kind(v) !== 'object') throw badParam(name, `${name} must be an object, got ${kind(v)}`);
  return v as JsonObject;
}

function optStop(body: JsonObject): string | string[] | undefined {
  if (!present(body, 'stop')) return undefined;
  const v = body.stop;
  if (typeof v === 'string') return v;
  if (Array.isArray(v) && v.every((s) => typeof s === 'string')) return v as string[];
  throw badParam('stop', 'stop must be a string or an array of strings');
}

function optTokenIds(body: JsonObject, name: string): number[] | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'number'))
    throw badParam(name, `${name} must be an array of integers`);
  return v as number[];
}

function optLogitBias(body: JsonObject): Record<string, number> | undefined {
  const bias = optObject(body, 'logit_bias');
  if (bias === undefined) return undefined;
  for (const [key, value] of Object.entries(bias)) {
    if (typeof value !== 'number')
      throw badParam('logit_bias', `logit_bias["${key}"] must be a number, got ${kind(value)}`);
  }
  return bias as Record<string, number>;
}

/** The model field: optional (defaults to the served model), and otherwise the served model's name. */
export function checkModel(body: JsonObject, env: Env): string {
  const served = modelName(env);
  const asked = optString(body, 'model');
  if (asked !== undefined && asked !== served) {
    throw new ApiError(
      404,
      `the model '${asked}' does not exist; this service serves '${served}'`,
      'invalid_request_error',
      'model',
      'model_not_found',
    );
  }
  return served;
}

/**
 * The model field of a generation: the served model (`adapter` undefined), or another name, which the shard
 * looks up among the model's LoRA adapters (adapters/<name>/; a 404 there when it has none of that name).
 */
export function checkModelOrAdapter(body: JsonObject, env: Env): { model: string; adapter?: string } {
  const served = modelName(env);
  const asked = optString(body, 'model');
  if (asked === undefined || asked === served) return { model: served };
  if (!isAdapterName(asked)) checkModel(body, env);
  return { model: asked, adapter: asked };
}

/**
 * `n`: how many choices per prompt, at most MAX_BATCH (the engine's own limit: its sequences of one step), checked
 * here with the engine's words so that one limit answers whichever side sees it first.
 */
export function choiceCount(body: JsonObject, env: Env): number {
  const n = optInteger(body, 'n') ?? 1;
  const max = Math.min(MAX_CHOICES, Math.max(1, Math.floor(intVar(env, 'MAX_BATCH'))));
  if (n < 1 || n > max) throw badParam('n', `n must be an integer in [1, ${max}], got ${n}`, 'invalid_value');
  return n;
}

/** Fields OpenAI's API has that this service does not implement: refused rather than silently ignored. */
export function refuseUnsupported(body: JsonObject, names: string[]): void {
  for (const name of names) {
    if (present(body, name)) throw badParam(name, `${name} is not supported by this service`, 'unsupported_parameter');
  }
}

function optSpeculative(body: JsonObject): GenerationRequest['speculative'] {
  if (body.speculative === null) return null; // turns the server's default off
  return optObject(body, 'speculative') as GenerationRequest['speculative'];
}

function optEarlyStopping(body: JsonObject): boolean | 'never' | undefined {
  if (!present(body, 'early_stopping')) return undefined;
  const v = body.early_stopping;
  if (typeof v === 'boolean' || v === 'never') return v;
  throw badParam('early_stopping', `early_stopping must be true, false or "never", got ${JSON.stringify(v)}`);
}

/**
 * Sampling, stopping and search parameters shared by both endpoints, under OpenAI's names plus vLLM's
 * extras (top_k, min_p, repetition_penalty, allowed_token_ids, beam search, structured outputs) and
 * `speculative`.
 */
export function samplingParams(
  body: JsonObject,
): Omit<GenerationRequest, 'prompt' | 'prompt_ids' | 'messages' | 'logprobs' | 'top_logprobs'> {
  const params = {
    max_tokens: optInteger(body, 'max_tokens'),
    temperature: optNumber(body, 'temperature'),
    top_p: optNumber(body, 'top_p'),
    top_k: optInteger(body, 'top_k'),
    min_p: optNumber(body, 'min_p'),
    frequency_penalty: optNumber(body, 'frequency_penalty'),
    presence_penalty: optNumber(body, 'presence_penalty'),
    repetition_penalty: optNumber(body, 'repetition_penalty'),
    seed: optInteger(body, 'seed'),
    stop: optStop(body),
    stop_token_ids: optTokenIds(body, 'stop_token_ids'),
    ignore_eos: optBoolean(body, 'ignore_eos'),
    logit_bias: optLogitBias(body),
    allowed_token_ids: optTokenIds(body, 'allowed_token_ids'),
    speculative: optSpeculative(body),
    use_beam_search: optBoolean(body, 'use_beam_search'),
    beam_width: optInteger(body, 'beam_width'),
    best_of: optInteger(body, 'best_of'),
    length_penalty: optNumber(body, 'length_penalty'),
    early_stopping: optEarlyStopping(body),
    // Structured outputs: response_format, or vLLM's structured_outputs / guided_* (see structured.ts).
    constraint: structuredConstraint(body),
  };
  // Leave absent fields out, so the engine applies its defaults.
  return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined));
}

/** `stream` and `stream_options.include_usage`. Beam search decides its sequences only at the end, so it cannot stream. */
export function streamOptions(body: JsonObject): { stream: boolean; includeUsage: boolean } {
  const stream = optBoolean(body, 'stream') ?? false;
  if (stream && (body.use_beam_search === true || present(body, 'beam_width'))) {
    throw badParam(
      'stream',
      'beam search cannot stream: its best sequences are known only when it ends; set stream: false',
      'unsupported_parameter',
    );
  }
  const options = optObject(body, 'stream_options');
  let includeUsage = false;
  if (options !== undefined) {
    if (!stream)
      throw badParam('stream_options', 'stream_options is only allowed when stream is true', 'invalid_value');
    const v = options.include_usage;
    if (v !== undefined && v !== null && typeof v !== 'boolean')
      throw badParam('stream_options.include_usage', 'stream_options.include_usage must be a boolean');
    includeUsage = v === true;
  }
  return { stream, includeUsage };
}

/** Chat messages, by the one validator the chat template uses too (text parts joined with '\n'; see chat-messages.ts). */
export function chatMessages(body: JsonObject): ChatMessage[] {
  return validateMessages(body.messages);
}

/** Completions' `prompt`: a string, a list of strings, a list of token ids, or a list of such lists. */
export function completionPrompts(body: JsonObject): Array<Pick<GenerationRequest, 'prompt' | 'prompt_ids'>> {
  const v = body.prompt;
  const message = 'prompt must be a string, an array of strings, an array of token ids or an array of token-id arrays';
  if (typeof v === 'string') return [{ prompt: v }];
  if (!Array.isArray(v)) throw badParam('prompt', v === undefined || v === null ? 'prompt is required' : message);
  if (v.length === 0) throw badParam('prompt', 'prompt must not be empty', 'invalid_value');
  if (v.every((x) => typeof x === 'number')) return [{ prompt_ids: v as number[] }];
  if (v.every((x) => typeof x === 'string')) return (v as string[]).map((prompt) => ({ prompt }));
  if (v.every((x) => Array.isArray(x) && x.every((y) => typeof y === 'number')))
    return (v as number[][]).map((ids) => ({ prompt_ids: ids }));
  throw badParam('prompt', message);
}

import { embed } from '../engine/embeddings/embed.js';
import type { Engine } from '../engine/engine.js';
import { fail, fromEngineError, fromGenerationError, invalidRequest, ok, type RpcResult } from './rpc-error.js';
import type { GenerationAdmission } from './generation-admission.js';
import { queueRefusal } from './tenancy/queue-share.js';
import type { RateLimitState } from './tenancy/rate-limiter.js';
import type { Caller } from './tenancy/tenant.js';

/** One input as the worker checked its shape: text, or token ids. */
export type EmbeddingInput = string | number[];

/** What /v1/embeddings asks of a shard, beside its inputs. */
export interface EmbeddingOptions {
  dimensions?: number;
  /** EMBEDDINGS_MAX_INPUT_TOKENS: tokens one input may have. */
  maxInputTokens: number;
}

/** The shard's answer: a vector per input, in order, and the prompt tokens they took. */
export interface EmbeddingsResult {
  vectors: Float32Array[];
  promptTokens: number;
  /** The key's limits after this request (absent when it has none), for the rate-limit headers. */
  rateLimit?: RateLimitState;
}

/** Where embeddings run for a caller: the fair queue's group and the prefix cache's salt are the caller's. */
export interface EmbeddingAccount {
  fairnessGroup: string;
  cacheSalt: string | undefined;
}

/**
 * The vectors of `inputs` on `engine`, each a prefill-only request batched with whatever else runs. Every input
 * is tokenised and checked before any is queued, so a bad one (empty, too long, ids outside the vocabulary) is a
 * 400 naming its index and nothing runs. The request takes one rate-limit slot, and its prompt tokens count
 * against the key's tokens per minute as generated tokens do.
 */
export async function runEmbeddings(
  engine: RpcResult<Engine>,
  admission: GenerationAdmission,
  maxQueue: number,
  caller: Caller,
  account: EmbeddingAccount,
  inputs: EmbeddingInput[],
  options: EmbeddingOptions,
): Promise<RpcResult<EmbeddingsResult>> {
  if (!engine.ok) return engine;
  const e = engine.value;
  const prompts: number[][] = [];
  for (const [i, input] of inputs.entries()) {
    const ids = typeof input === 'string' ? e.tokenizer.encodePrompt(input) : input;
    const param = inputs.length === 1 ? 'input' : `input[${i}]`;
    if (ids.length === 0) return fail(invalidRequest(`${param} is empty`, param));
    const outside = ids.find((id) => id >= e.config.vocabSize);
    if (outside !== undefined)
      return fail(
        invalidRequest(`${param}: token id ${outside} is outside the vocabulary [0, ${e.config.vocabSize})`, param),
      );
    if (ids.length > options.maxInputTokens)
      return fail(
        invalidRequest(
          `${param} has ${ids.length} tokens; at most ${options.maxInputTokens} are taken per input (EMBEDDINGS_MAX_INPUT_TOKENS)`,
          param,
          'context_length_exceeded',
        ),
      );
    prompts.push(ids);
  }
  const full = queueRefusal(e, maxQueue, caller.tenant.owner, prompts.length);
  if (full) return fail(full);
  const admitted = admission.admit(caller.tenant.name, caller.limits);
  if (!admitted.ok) return admitted;
  const { ticket, state } = admitted.value;
  const abort = new AbortController();
  const started: Promise<{ embedding: Float32Array; promptTokens: number }>[] = [];
  try {
    for (const ids of prompts)
      started.push(embed(e, { prompt_ids: ids }, options.dimensions, { ...account, signal: abort.signal }));
  } catch (err) {
    // A refusal (bad dimensions, an id outside the vocabulary) cancels those already queued: nothing else runs.
    abort.abort();
    for (const p of started) p.catch(() => undefined);
    ticket.settle(0);
    return fail(fromEngineError(err));
  }
  try {
    const done = await Promise.all(started);
    const promptTokens = done.reduce((n, d) => n + d.promptTokens, 0);
    ticket.settle(promptTokens);
    const limited = state.requests || state.tokens ? { rateLimit: state } : {};
    return ok({ vectors: done.map((d) => d.embedding), promptTokens, ...limited });
  } catch (err) {
    abort.abort();
    ticket.settle(0);
    return fail(fromGenerationError(err));
  }
}

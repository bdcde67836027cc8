import { CapacityError, InvalidRequestError } from './errors.js';
import { resolveBeamParams, type BeamParams } from './beam/beam-params.js';
import { resolveSamplingParams, type SamplingParams } from './sampling/sampling-params.js';
import { resolveSpeculativeParams, type SpeculativeParams } from './speculative/speculative-params.js';
import { validateStops } from './stop-strings.js';
import { resolvePromptLogprobs } from './sampling/prompt-logprobs.js';
import type { CompiledConstraint } from './constraints/compiler.js';
import { deferPastReasoning } from './constraints/reasoning-gate.js';
import type { Constrained, JsonValue } from './constraints/spec.js';
import { resolveEmbeddingParams, type EmbeddingParams, type EmbeddingRequest } from './embeddings/embedding-params.js';
import type { Pooling } from './embeddings/pooling.js';

/** A chat message as OpenAI's API carries it (tool calls and results: see tokenizer/chat-messages.ts). */
export interface ChatMessage {
  role: string;
  content: string | null;
  tool_calls?: readonly { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
  name?: string;
}

/**
 * A generation request in OpenAI's spelling (snake_case), so the service can pass API fields through.
 * Exactly one of `prompt`, `prompt_ids` and `messages` is given.
 */
export interface GenerationRequest {
  /**
   * A LoRA adapter of the model, by name (the service's `model` naming one): the host loads it
   * (Engine.loadAdapter) and passes it as GenerateOptions.adapter; the engine itself reads only that option.
   */
  adapter?: string;
  prompt?: string;
  /** Token ids, fed as they are (no template, no BOS added). */
  prompt_ids?: readonly number[];
  /** Rendered with the model's chat template, with the assistant generation prompt appended. */
  messages?: readonly ChatMessage[];
  /** Completions to generate (OpenAI's `n`): the prompt is prefilled once and forked copy-on-write. Default 1. */
  n?: number;
  /** Completion tokens at most; default: min(DEFAULT_MAX_TOKENS, room left in the context window). */
  max_tokens?: number;
  stop?: string | readonly string[] | null;
  /** Extra token ids that end the generation (besides the model's EOS ids). */
  stop_token_ids?: readonly number[];
  /** Keep going past EOS (benchmarks). */
  ignore_eos?: boolean;
  temperature?: number;
  top_k?: number;
  top_p?: number;
  min_p?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  repetition_penalty?: number;
  logit_bias?: Record<string, number> | null;
  /** Only these token ids may be generated (vLLM). */
  allowed_token_ids?: readonly number[] | null;
  seed?: number | null;
  logprobs?: boolean;
  top_logprobs?: number;
  /** vLLM's: each prompt token's log-probability given the ones before it, with this many alternatives. */
  prompt_logprobs?: number | null;
  /** Speculative decoding for this request; null turns off the engine's default. */
  speculative?: { method: 'ngram' | 'draft'; num_tokens: number } | null;
  /** Beam search (vLLM): returns the n best of `beam_width` (or `best_of`) beams, with their scores. */
  use_beam_search?: boolean;
  beam_width?: number;
  best_of?: number;
  length_penalty?: number;
  early_stopping?: boolean | 'never';
  /** Structured outputs: the grammar every completion must follow, and the API field it came from. */
  constraint?: Constrained | null;
  /** Function definitions (OpenAI's `tools`), handed to the chat template as HF templates expect them. */
  tools?: readonly JsonValue[] | null;
  /** Extra variables for the chat template (`enable_thinking: false`), as HF's apply_chat_template takes them. */
  chat_template_kwargs?: Readonly<Record<string, JsonValue>> | null;
  /** Prefill only: the prompt's pooled final hidden state (its done event's `embedding`) instead of tokens. */
  embedding?: EmbeddingRequest | null;
}

export const DEFAULT_MAX_TOKENS = 256;

export function isNonNegativeInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/** Checks token ids before anything runs: a non-empty list of integers inside the model's vocabulary. */
export function checkTokenIds(ids: readonly unknown[], vocabSize: number, param: string): number[] {
  if (ids.length === 0) throw new InvalidRequestError(param, `${param} must not be empty`);
  ids.forEach((id, i) => {
    if (!isNonNegativeInt(id) || id >= vocabSize) {
      throw new InvalidRequestError(param, `${param}[${i}] = ${String(id)} is not a token id in [0, ${vocabSize})`);
    }
  });
  return ids as number[];
}

/**
 * Tokenising is synchronous work on the shard's one thread: text longer than the context window could hold even
 * at the tokenizer's longest token can never fit, so it is refused before any of it is tokenised.
 */
function checkPromptChars(chars: number, param: string, ctx: RequestContext): void {
  if (chars <= ctx.maxPromptChars) return;
  throw new InvalidRequestError(
    param,
    `the ${param === 'prompt' ? 'prompt' : "messages' and tools' text"} is over ${ctx.maxPromptChars} characters, more than this model's context window of ${ctx.contextWindow} tokens can hold; it was not tokenised`,
    'context_length_exceeded',
  );
}

/**
 * Characters a chat template can render from `value` (messages, tools and their schemas), counted without
 * rendering: every string and key, and every number or literal as written, at any depth. Stops counting past
 * `limit`, so a huge value costs no more to refuse than one just over the bound.
 */
export function renderableChars(value: unknown, limit = Number.POSITIVE_INFINITY): number {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0 && n <= limit) {
    const v = stack.pop();
    if (typeof v === 'string') n += v.length;
    else if (typeof v === 'number' || typeof v === 'boolean') n += String(v).length;
    else if (Array.isArray(v)) for (const x of v) stack.push(x);
    else if (typeof v === 'object' && v !== null)
      for (const [k, x] of Object.entries(v)) {
        n += k.length;
        stack.push(x);
      }
  }
  return n;
}

/** chat_template_kwargs: an object of variables, none of them one the template is already handed. */
function templateVariables(kwargs: unknown): Readonly<Record<string, unknown>> | undefined {
  if (kwargs === undefined || kwargs === null) return undefined;
  if (typeof kwargs !== 'object' || Array.isArray(kwargs))
    throw new InvalidRequestError('chat_template_kwargs', 'chat_template_kwargs must be an object');
  for (const name of ['messages', 'tools', 'add_generation_prompt', 'bos_token', 'eos_token', 'pad_token', 'unk_token'])
    if (name in kwargs)
      throw new InvalidRequestError(
        `chat_template_kwargs.${name}`,
        `chat_template_kwargs cannot set '${name}': it is the request's own`,
      );
  return kwargs as Record<string, unknown>;
}

/** Resolves max_tokens against the prompt and the context window; refuses what can never fit. */
export function resolveMaxTokens(maxTokens: unknown, promptLength: number, contextWindow: number): number {
  const room = contextWindow - promptLength;
  if (room <= 0) {
    throw new InvalidRequestError(
      'prompt',
      `the prompt is ${promptLength} tokens; this model's context window is ${contextWindow} tokens and leaves no room to generate`,
      'context_length_exceeded',
    );
  }
  if (maxTokens === undefined || maxTokens === null) return Math.min(DEFAULT_MAX_TOKENS, room);
  if (typeof maxTokens !== 'number' || !Number.isSafeInteger(maxTokens) || maxTokens < 1) {
    throw new InvalidRequestError('max_tokens', `max_tokens must be an integer >= 1, got ${JSON.stringify(maxTokens)}`);
  }
  if (maxTokens > room) {
    throw new InvalidRequestError(
      'max_tokens',
      `prompt (${promptLength} tokens) + max_tokens (${maxTokens}) exceeds the context window of ${contextWindow} tokens`,
      'context_length_exceeded',
    );
  }
  return maxTokens;
}

/** A request after validation: everything the engine loop needs, nothing left to check. */
export interface ResolvedRequest {
  promptIds: number[];
  maxTokens: number;
  /** Completions to generate from the prompt (OpenAI's `n`). */
  n: number;
  sampling: SamplingParams;
  stops: string[];
  /** Token ids that end the generation: the model's EOS ids (unless ignore_eos) and stop_token_ids. */
  stopTokenIds: ReadonlySet<number>;
  speculative: SpeculativeParams | undefined;
  /** Set for beam search; `n` is then how many of the best finished beams are returned. */
  beam: BeamParams | undefined;
  /** Structured outputs: each completion (each beam) builds its own matcher from this. */
  constraint: CompiledConstraint | undefined;
  /** Alternatives per prompt token when the prompt's log-probabilities are wanted; undefined when not. */
  promptLogprobs: number | undefined;
  /** Set for an embeddings request: prefill only, pooled as the model declares. */
  embedding: EmbeddingParams | undefined;
}

/** What a request is checked against: the model, its tokenizer and the engine's limits. */
export interface RequestContext {
  /** Token ids of text as it is (rendered chat templates carry their own special tokens). */
  encode(text: string): number[];
  /** Token ids of a raw prompt, with the BOS (or other markers) the tokenizer's post-processor adds. */
  encodePrompt(text: string): number[];
  /** Chat messages (and tools, if any) to prompt text; throws InvalidRequestError('messages') for malformed ones. */
  renderChat(messages: unknown, tools?: readonly unknown[], variables?: Readonly<Record<string, unknown>>): string;
  /** Token ids of the rendered chat, control tokens from the template only (tokenizer/chat-encoding.ts). */
  encodeChat?(messages: unknown, tools?: readonly unknown[], variables?: Readonly<Record<string, unknown>>): number[];
  /** Compiles a grammar (cached); throws InvalidRequestError naming the field for what cannot be enforced. */
  compileConstraint?(constraint: Constrained): CompiledConstraint;
  /** Ids the model knows (prompts may use them all). */
  vocabSize: number;
  /** Ids both the model and the tokenizer know (logit_bias may name them). */
  samplableVocab: number;
  contextWindow: number;
  /** Characters past which a prompt cannot fit the context whatever it tokenises to: refused before tokenising. */
  maxPromptChars: number;
  eosTokenIds: readonly number[];
  maxN: number;
  kv: { blocksFor(tokens: number): number; total: number };
  hasDraftModel: boolean;
  /** The engine's speculation for requests that do not say. */
  defaultSpeculative: SpeculativeParams | undefined;
  /** How the model pools its embeddings, and their full size. */
  pooling: Pooling;
  hiddenSize: number;
}

/** Tokenises the prompt and checks every parameter; throws InvalidRequestError naming the first bad one. */
export function resolveRequest(request: GenerationRequest, ctx: RequestContext): ResolvedRequest {
  const given = (['prompt', 'prompt_ids', 'messages'] as const).filter((k) => request[k] !== undefined);
  if (given.length !== 1) {
    throw new InvalidRequestError(given[1] ?? 'prompt', 'give exactly one of prompt, prompt_ids and messages');
  }
  let promptIds: number[];
  if (request.prompt !== undefined) {
    if (typeof request.prompt !== 'string' || request.prompt.length === 0) {
      throw new InvalidRequestError('prompt', 'prompt must be a non-empty string');
    }
    checkPromptChars(request.prompt.length, 'prompt', ctx);
    promptIds = ctx.encodePrompt(request.prompt);
  } else if (request.prompt_ids !== undefined) {
    if (!Array.isArray(request.prompt_ids))
      throw new InvalidRequestError('prompt_ids', 'prompt_ids must be an array of token ids');
    promptIds = [...request.prompt_ids];
  } else {
    const tools = request.tools ?? undefined;
    const variables = templateVariables(request.chat_template_kwargs);
    // The template renders tools (descriptions, schemas, names) beside the messages: both count.
    const messageChars = renderableChars(request.messages, ctx.maxPromptChars);
    const toolChars = renderableChars(tools, ctx.maxPromptChars);
    checkPromptChars(messageChars + toolChars, toolChars > messageChars ? 'tools' : 'messages', ctx);
    promptIds = ctx.encodeChat
      ? ctx.encodeChat(request.messages, tools, variables)
      : ctx.encode(ctx.renderChat(request.messages, tools, variables));
  }
  checkTokenIds(promptIds, ctx.vocabSize, given[0]);
  const maxTokens = resolveMaxTokens(request.max_tokens, promptIds.length, ctx.contextWindow);
  const n = request.n ?? 1;
  if (!Number.isSafeInteger(n) || n < 1 || n > ctx.maxN) {
    throw new InvalidRequestError('n', `n must be an integer in [1, ${ctx.maxN}], got ${JSON.stringify(request.n)}`);
  }
  // Types and ranges first, so a bad value is named as such before it is refused for beam search.
  const requested = resolveSamplingParams(request, ctx.samplableVocab);
  if (requested.seed !== undefined && !Number.isSafeInteger(requested.seed + (n - 1))) {
    throw new InvalidRequestError(
      'seed',
      `seed + n - 1 must be a safe integer (completion i is seeded with seed + i), got seed ${requested.seed}`,
    );
  }
  const beam = resolveBeamParams(request, n, ctx.maxN);
  if (beam) refuseWithBeamSearch(request);
  // Forks (and beams) share the prompt's blocks; each needs its own for its completion, plus one copy-on-write.
  const forks = beam?.width ?? n;
  const needed = ctx.kv.blocksFor(promptIds.length + maxTokens) + (forks - 1) * (ctx.kv.blocksFor(maxTokens) + 1);
  if (needed > ctx.kv.total) {
    throw new CapacityError(
      'max_tokens',
      `prompt (${promptIds.length} tokens) + max_tokens (${maxTokens}) × ${beam ? 'beam width' : 'n'} (${forks}) needs ${needed} KV blocks; the cache has ${ctx.kv.total}`,
      'kv_cache_capacity_exceeded',
    );
  }
  const sampling = beam ? { ...requested, temperature: 0 } : requested;
  const speculative = beam
    ? undefined
    : resolveSpeculativeParams(request.speculative, ctx.hasDraftModel, ctx.defaultSpeculative);
  const stops = validateStops(request.stop);
  const stopTokenIds = new Set<number>(request.ignore_eos ? [] : ctx.eosTokenIds);
  const extra = request.stop_token_ids ?? [];
  if (!Array.isArray(extra))
    throw new InvalidRequestError('stop_token_ids', 'stop_token_ids must be an array of token ids');
  if (extra.length > 0) for (const id of checkTokenIds(extra, ctx.vocabSize, 'stop_token_ids')) stopTokenIds.add(id);
  if (beam && sampling.allowedTokenIds) {
    const possible = distinctCompletions(sampling.allowedTokenIds, stopTokenIds, maxTokens, n);
    if (possible < n)
      throw new InvalidRequestError(
        'n',
        `allowed_token_ids and max_tokens leave only ${possible} distinct completions; n is ${n}`,
      );
  }
  let constraint: CompiledConstraint | undefined;
  if (request.constraint) {
    if (!ctx.compileConstraint)
      throw new InvalidRequestError(
        request.constraint.param,
        'structured outputs are not available here',
        'unsupported_parameter',
      );
    constraint = ctx.compileConstraint(request.constraint);
    const reasoning = request.constraint.reasoning;
    if (reasoning)
      constraint = deferPastReasoning(
        constraint,
        { begin: ctx.encode(reasoning.begin), end: ctx.encode(reasoning.end) },
        promptIds,
      );
  }
  const promptLogprobs = resolvePromptLogprobs(request.prompt_logprobs);
  if (request.embedding && (n !== 1 || beam || constraint || promptLogprobs !== undefined))
    throw new InvalidRequestError(
      'embedding',
      'an embeddings request is one prefill: no n, beams, speculation, grammar or logprobs',
    );
  const embedding = request.embedding
    ? resolveEmbeddingParams(request.embedding, ctx.pooling, ctx.hiddenSize)
    : undefined;
  return {
    promptIds,
    maxTokens,
    n,
    sampling,
    stops,
    stopTokenIds,
    speculative,
    beam,
    constraint,
    promptLogprobs,
    embedding,
  };
}

/** How many different completions (counted up to `cap`) tokens from `allowed` can form within maxTokens. */
function distinctCompletions(
  allowed: ReadonlySet<number>,
  stopTokenIds: ReadonlySet<number>,
  maxTokens: number,
  cap: number,
): number {
  const stops = [...allowed].filter((t) => stopTokenIds.has(t)).length;
  const others = allowed.size - stops;
  let total = 0;
  let prefixes = 1; // others^length: the prefixes of each length so far
  for (let length = 1; length <= maxTokens && total < cap; length++) {
    total += prefixes * stops; // end here on a stop token
    prefixes *= others;
    if (prefixes === 0) break;
  }
  return Math.min(cap, total + prefixes);
}

/**
 * Beam search ranks whole sequences by log-probability, so what reshapes or samples the distribution,
 * streams text, or cuts text mid-token has no meaning there (as vLLM): refused by name, not ignored.
 */
function refuseWithBeamSearch(request: GenerationRequest): void {
  const given = (v: unknown): boolean => v !== undefined && v !== null;
  const neutral: [keyof GenerationRequest, (v: unknown) => boolean][] = [
    ['temperature', (v) => v === 0],
    ['top_p', (v) => v === 1],
    ['top_k', (v) => v === 0 || v === -1],
    ['min_p', (v) => v === 0],
    ['frequency_penalty', (v) => v === 0],
    ['presence_penalty', (v) => v === 0],
    ['repetition_penalty', (v) => v === 1],
    ['logprobs', (v) => v === false],
    ['top_logprobs', (v) => v === 0],
    ['speculative', () => false],
  ];
  for (const [param, isNeutral] of neutral) {
    if (given(request[param]) && !isNeutral(request[param])) {
      throw new InvalidRequestError(param, `${param} cannot be used with beam search`, 'unsupported_parameter');
    }
  }
  const stop = request.stop;
  if (given(stop) && (typeof stop === 'string' || (Array.isArray(stop) && stop.length > 0))) {
    throw new InvalidRequestError(
      'stop',
      'stop strings cannot be used with beam search; use stop_token_ids',
      'unsupported_parameter',
    );
  }
}

import { AdapterCache, adapterPart, listAdapters } from './adapters/adapter-cache.js';
import type { EngineLimits } from './defaults.js';
import type { ModelConfig } from './model/config.js';
import { chooseWeights } from './model/default-weights.js';
import { loadModelMeta, type ModelDtype, type ModelSource } from './model/model-files.js';
import type { EngineRuntime } from './model/runtime.js';
import { digestingSource } from './model/weights-digest.js';
import { loadRunner } from './runners/create-runner.js';
import type { LoadedRunner, RunnerOptions } from './runners/runner-options.js';
import type { FootprintPart } from './runners/memory-budget.js';
import type { ModelRunner } from './runners/model-runner.js';
import type { StageLink } from './runners/stages/stage-protocol.js';
import { TextTokenizer } from '../tokenizer/tokenizer.js';
import { readPooling, type Pooling } from './embeddings/pooling.js';

/** What loading a model needs besides its source: which weights, and how the runner is sized and checked. */
export interface ModelLoadOptions extends Omit<RunnerOptions, keyof EngineLimits | 'isolateBudget'> {
  dtype?: ModelDtype;
  /** The host's name for `dtype`, for the refusal that lists a folder's weights (`MODEL_DTYPE`, `--dtype`). */
  dtypeOption?: string;
  /** A chat template to use instead of tokenizer_config.json's (CHAT_TEMPLATE): a base model's, or a better one. */
  chatTemplate?: string;
  /** Digest the weights file as it loads (a durable KV store names its blocks by it). */
  digest?: boolean;
  /** EngineOptions.adapterCacheBytes. */
  adapterCacheBytes?: number;
  /** RunnerOptions.isolateBudget, told the tokenizer's vocabulary too (what the isolate's JS part grows with). */
  isolateBudget?: (
    config: ModelConfig,
    tokenizerVocab: number,
  ) => ReturnType<NonNullable<RunnerOptions['isolateBudget']>>;
}

/**
 * A model folder, loaded: everything engines read and never write (config, tokenizer, chat template, the
 * weights on their runner), so every engine of an isolate that serves the model can share one load.
 */
export interface LoadedModel {
  config: ModelConfig;
  rawConfig: Record<string, unknown>;
  tokenizer: TextTokenizer;
  /** tokenizer.json's `model` section: a draft model must map ids to the same tokens. */
  tokenizerModel: unknown;
  /** The chat template (undefined for a base model without one) and tokenizer_config.json, which it reads. */
  chat: { template: string | undefined; config: Record<string, unknown> };
  dtype: ModelDtype;
  /** How its embeddings are pooled (modules.json, or the decoder default). */
  pooling: Pooling;
  /** The weights file's digest, or '' when it was not asked for. */
  digest: string;
  weightBytes: number;
  /** Bytes held once however many engines share it (weights, shared scratch). */
  shared(): FootprintPart[];
  /** Bytes each engine's runner holds besides its KV pool. */
  perRunner: readonly FootprintPart[];
  /** The model's LoRA adapters, loaded on first use within their share of the budget (part of shared()). */
  adapters: AdapterCache;
  /**
   * A runner for one more engine: the one the load built first, then others over the same weights. Over
   * pipeline stages, the first only for the engine whose stages it was built with (`links`).
   */
  takeRunner(limits: EngineLimits, links?: StageLink[]): Promise<ModelRunner>;
}

/** Reads a model folder's config and tokenizer and places its weights on the runner `loadRunner` picks. */
export async function loadModel(
  runtime: EngineRuntime,
  source: ModelSource,
  options: ModelLoadOptions,
  limits: EngineLimits,
): Promise<LoadedModel> {
  const files = await loadModelMeta(source);
  const { dtype, file: weightsFile } = await chooseWeights(source, files.rawConfig, options.dtype, options.dtypeOption);
  const digesting = options.digest ? digestingSource(source, weightsFile) : undefined;
  const tokenizer = TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig);
  const { isolateBudget } = options;
  const adapterBytes =
    options.adapterCacheBytes ?? ((await listAdapters(source)).length > 0 ? ADAPTER_CACHE_DEFAULT_BYTES : 0);
  const loaded = await loadRunner(runtime, digesting?.source ?? source, dtype, weightsFile, files.config, {
    ...options,
    ...limits,
    adapterCacheBytes: adapterBytes,
    isolateBudget: isolateBudget && ((config) => isolateBudget(config, tokenizer.vocabSize)),
  });
  // A base model has none: it loads and serves completions; only chat requests are refused (Engine.resolve).
  const template = options.chatTemplate ?? chatTemplateOf(files.tokenizerConfig.chat_template);
  return {
    config: files.config,
    rawConfig: files.rawConfig,
    tokenizer,
    tokenizerModel: files.tokenizerJson.model,
    chat: { template, config: files.tokenizerConfig },
    dtype,
    pooling: await readPooling(source),
    digest: digesting ? (loaded.digest ?? (await digesting.digest())) : '',
    weightBytes: loaded.weightBytes,
    shared: () => [...loaded.shared(), ...adapterPart(adapterBytes)],
    perRunner: loaded.perRunner,
    adapters: new AdapterCache(source, files.config, adapterBytes),
    takeRunner: firstThenAnother(loaded, options.pipeline?.links),
  };
}

/** The adapters' share of the memory budget where a model folder lists some and ADAPTER_CACHE_MB is unset. */
export const ADAPTER_CACHE_DEFAULT_BYTES = 16 * 2 ** 20;

function firstThenAnother(
  loaded: LoadedRunner,
  firstLinks: StageLink[] | undefined,
): (limits: EngineLimits, links?: StageLink[]) => Promise<ModelRunner> {
  let first: ModelRunner | undefined = loaded.runner;
  return async (limits, links) => {
    if (links !== firstLinks) return loaded.another(limits, links);
    const runner = first ?? (await loaded.another(limits, links));
    first = undefined;
    return runner;
  };
}

/**
 * tokenizer_config.json's `chat_template`: a string, or (transformers' named templates) a list of
 * `{name, template}` of which `default` is the chat one; undefined when there is none.
 */
export function chatTemplateOf(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) return undefined;
  const named = value.filter(
    (t): t is { name: unknown; template: string } =>
      typeof t === 'object' && t !== null && typeof t.template === 'string',
  );
  return (named.find((t) => t.name === 'default') ?? named[0])?.template;
}

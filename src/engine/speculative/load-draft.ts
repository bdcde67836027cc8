import { InvalidRequestError } from '../errors.js';
import { BlockPool } from '../kv/block-pool.js';
import { KvCacheManager } from '../kv/paged-kv.js';
import { kvBytesPerToken, type ModelConfig } from '../model/config.js';
import { loadModelFiles, type ModelDtype, type ModelSource } from '../model/model-files.js';
import type { EngineLimits } from '../defaults.js';
import { OnnxRunner } from '../runners/ort/onnx-runner.js';
import { mib } from '../runners/memory-budget.js';
import type { EngineRuntime } from '../model/runtime.js';
import { DraftModelProposer } from './draft-proposer.js';

/** A draft model for speculation: where its folder is, which variant, and its KV pool's byte budget. */
export interface DraftModelOptions {
  source: ModelSource;
  dtype?: ModelDtype;
  /** Bytes of the draft's own KV pool; default: room for as many tokens as the target's pool. */
  kvCacheBytes?: number;
}

/** What the draft must agree with, and what it shares with the target. */
export interface DraftTarget {
  config: ModelConfig;
  /** The target tokenizer.json's `model` section: a draft must map ids to the same tokens. */
  tokenizerModel: unknown;
  samplableVocab: number;
  modelId: string;
  /** The target's weights file and KV pool: with the draft's they must fit limits.memoryBudgetBytes. */
  weightBytes: number;
  limits: EngineLimits;
  intraOpNumThreads?: number;
}

/** Loads the draft model and its KV pool; refuses one that does not read and write the target's token ids. */
export async function loadDraftModel(
  runtime: EngineRuntime,
  draft: DraftModelOptions,
  target: DraftTarget,
): Promise<DraftModelProposer> {
  const files = await loadModelFiles(draft.source, draft.dtype ?? 'fp32');
  if (
    files.config.vocabSize !== target.config.vocabSize ||
    JSON.stringify(files.tokenizerJson.model) !== JSON.stringify(target.tokenizerModel)
  ) {
    throw new InvalidRequestError('draft', "the draft model must share the target model's tokenizer and vocabulary");
  }
  if (files.config.maxPositionEmbeddings < target.config.maxPositionEmbeddings) {
    throw new InvalidRequestError(
      'draft',
      `the draft model's context window (${files.config.maxPositionEmbeddings}) is shorter than the model's (${target.config.maxPositionEmbeddings})`,
    );
  }
  const perToken = kvBytesPerToken(files.config);
  const { kvCacheBytes, blockSize, memoryBudgetBytes: budget } = target.limits;
  const kvBytes = draft.kvCacheBytes ?? Math.floor((kvCacheBytes / kvBytesPerToken(target.config)) * perToken);
  const total = target.weightBytes + kvCacheBytes + files.onnx.byteLength + kvBytes;
  if (budget !== undefined && total > budget) {
    throw new InvalidRequestError(
      'draft',
      `the model and its draft do not fit the memory budget: ${mib(target.weightBytes + kvCacheBytes)} + draft weights ${mib(files.onnx.byteLength)} + draft KV cache ${mib(kvBytes)} = ${mib(total)} > ${mib(budget)}`,
      'model_too_large',
    );
  }
  // Checked above with the target's weights: the draft's runner is onnxruntime on the whole file.
  const runner = await OnnxRunner.create(runtime, files.onnx, files.config, {
    intraOpNumThreads: target.intraOpNumThreads,
  });
  const numBlocks = Math.floor(kvBytes / (blockSize * perToken));
  if (numBlocks < 1) throw new RangeError('the draft kvCacheBytes is too small for one KV block');
  const memory = runner.createKvMemory(files.config, numBlocks, blockSize, 'fp32');
  const kv = new KvCacheManager(new BlockPool(files.config, numBlocks, blockSize), `draft:${target.modelId}`);
  return new DraftModelProposer(runner, kv, memory, target.samplableVocab);
}

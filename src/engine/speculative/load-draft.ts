import { InvalidRequestError } from '../errors.js';
import { BlockPool } from '../kv/block-pool.js';
import { KvCacheManager } from '../kv/paged-kv.js';
import { kvBytesPerToken, type ModelConfig } from '../model/config.js';
import { loadModelFiles, type ModelDtype, type ModelSource } from '../model/model-files.js';
import { ModelRunner, type RunnerOptions } from '../model/runner.js';
import type { OrtRuntime } from '../model/runtime.js';
import { DraftModelProposer } from './draft-proposer.js';

/** A draft model for speculation: where its folder is, which variant, and its KV pool's byte budget. */
export interface DraftModelOptions {
  source: ModelSource;
  dtype?: ModelDtype;
  /** Bytes of the draft's own KV pool; default: the target's budget. */
  kvCacheBytes?: number;
}

/** What the draft must agree with, and what it shares with the target. */
export interface DraftTarget {
  config: ModelConfig;
  /** The target tokenizer.json's `model` section: a draft must map ids to the same tokens. */
  tokenizerModel: unknown;
  samplableVocab: number;
  modelId: string;
  kvCacheBytes: number;
  blockSize: number;
  runner: RunnerOptions;
}

/** Loads the draft model and its KV pool; refuses one that does not read and write the target's token ids. */
export async function loadDraftModel(runtime: OrtRuntime, draft: DraftModelOptions, target: DraftTarget): Promise<DraftModelProposer> {
  const files = await loadModelFiles(draft.source, draft.dtype ?? 'fp32');
  if (files.config.vocabSize !== target.config.vocabSize || JSON.stringify(files.tokenizerJson.model) !== JSON.stringify(target.tokenizerModel)) {
    throw new InvalidRequestError('draft', "the draft model must share the target model's tokenizer and vocabulary");
  }
  const runner = await ModelRunner.create(runtime, files.onnx, files.config, target.runner);
  const numBlocks = Math.floor((draft.kvCacheBytes ?? target.kvCacheBytes) / (target.blockSize * kvBytesPerToken(files.config)));
  if (numBlocks < 1) throw new RangeError('the draft kvCacheBytes is too small for one KV block');
  const kv = new KvCacheManager(new BlockPool(files.config, numBlocks, target.blockSize), `draft:${target.modelId}`);
  return new DraftModelProposer(runner, kv, target.samplableVocab);
}

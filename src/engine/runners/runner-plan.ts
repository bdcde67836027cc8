// What serving a model will take, known before its weights are read: the runner loadRunner will pick and
// the memory the budget will count. `npm start` reports it (and refuses what cannot load) before wrangler dev
// starts, and /v1/models shows the runner before a shard has loaded the model. The terms are the load's own
// (create-runner.ts, isolate-pool.ts, memory-budget.ts), so the plan and the load cannot disagree on a rule.
import type { EngineLimits } from '../defaults.js';
import type { KvDtype } from '../kv/block-pool.js';
import { scratchBytes } from './wasm/scratch-layout.js';
import type { ModelConfig } from '../model/config.js';
import type { ModelDtype } from '../model/model-files.js';
import type { RunnerChoice } from '../model/runtime.js';
import { IsolateModels } from './isolate-models.js';
import { IsolatePoolPlan } from './isolate-pool.js';
import { MemoryBudget, onnxruntimeFootprint, type FootprintPart } from './memory-budget.js';

export type RunnerKind = 'kernels' | 'onnxruntime';

/**
 * The runner loadRunner picks for `dtype` on `runtime`, from what is known before the graph is read: GGUF and
 * a runtime with our kernels (unless forced to onnxruntime) go to the kernels, the rest to onnxruntime. The
 * kernels run Llama graphs; a graph of another model_type is planned on onnxruntime where the runtime has it.
 * A Llama graph the kernels turn out not to cover falls back when it loads: the loaded runner says so.
 * Over pipeline stages (`pipeline`) the layers run on the stages' kernels and the head's ends on its own.
 */
export function plannedRunner(
  runtime: { kernels?: unknown; hasOnnxruntime?: boolean; runner?: RunnerChoice; gpu?: unknown },
  dtype: ModelDtype,
  rawConfig: Record<string, unknown>,
  pipeline = false,
): RunnerKind {
  if (pipeline) return 'kernels';
  const choice = runtime.runner ?? 'auto';
  const kernels = runtime.kernels !== undefined && runtime.gpu === undefined;
  if (choice === 'onnxruntime' || !kernels) return 'onnxruntime';
  if (dtype === 'gguf' || choice === 'kernels' || runtime.hasOnnxruntime === false) return 'kernels';
  return rawConfig.model_type === 'llama' ? 'kernels' : 'onnxruntime';
}

export interface MemoryPlanInput {
  config: ModelConfig;
  /** The tokenizer's vocabulary (what the isolate's JS part grows with); config.vocabSize where unread. */
  tokenizerVocab: number;
  dtype: ModelDtype;
  /** The weights file's bytes: the kernels place about that much (a GGUF file exactly, as it is judged whole). */
  weightBytes: number;
  runner: RunnerKind;
  /** The runtime's name: `wasm` (workerd's) counts the isolate besides the runner. */
  runtimeName: string;
  limits: EngineLimits;
  kvDtype: KvDtype;
  /** Shards that may share the isolate (SHARD_COUNT). */
  engines: number;
}

export interface MemoryPlan {
  /** What the isolate holds once (weights, scratch or onnxruntime, code and tokenizer). */
  shared: FootprintPart[];
  /** Each shard's own part and KV pool, as its load will size it. */
  perShard: FootprintPart[];
  /** Each shard's KV pool bytes (KV_CACHE_MB, or the equal share that leaves room for every shard). */
  kvCacheBytes: number;
  /** Everything counted with `engines` shards in one isolate. */
  totalBytes: number;
}

const sum = (parts: readonly FootprintPart[]): number => parts.reduce((n, p) => n + p.bytes, 0);

/**
 * The memory the model's load will count, for an isolate of `engines` shards, or the refusal the load would
 * give (503 model_too_large, its message naming every term): the same MemoryBudget and IsolatePoolPlan, over
 * an isolate that holds nothing yet.
 */
export function planMemory(input: MemoryPlanInput): MemoryPlan {
  const { config, tokenizerVocab, limits, runner, runtimeName, weightBytes } = input;
  const share = { models: new IsolateModels(), holder: 'plan', source: 'plan', engines: input.engines };
  const plan = new IsolatePoolPlan(share, 'plan', limits, input.kvDtype, runtimeName);
  const { besides, kvBytes } = plan.budget(config, tokenizerVocab);
  const budget = new MemoryBudget(config, kvBytes, limits.memoryBudgetBytes, besides);
  const [weights, ...session] =
    runner === 'kernels'
      ? [{ label: 'weights', bytes: weightBytes }]
      : onnxruntimeFootprint(runtimeName, weightBytes, input.dtype === 'fp16');
  const runnerShared =
    runner === 'kernels' ? [weights, { label: 'scratch', bytes: scratchBytes(config, limits) }] : [weights];
  budget.check([...runnerShared, ...session]);
  const shared = [...runnerShared, ...plan.isolateParts(tokenizerVocab)];
  const pool = plan.poolFor(config, tokenizerVocab, session, shared);
  return {
    shared,
    perShard: pool.parts,
    kvCacheBytes: pool.kvCacheBytes,
    totalBytes: sum(shared) + input.engines * sum(pool.parts),
  };
}

// What the start check says of memory besides its plan: the KV pool as it will be (KV_CACHE_MB is what a shard
// asks for; the budget may leave it less), and, for a model past MEMORY_BUDGET_MB, the settings that would fit,
// each tried with the server's own plan (planMemory) rather than guessed from one term of the sum.
import { kvBytesPerToken } from '../../src/engine/model/config.js';
import { mib } from '../../src/engine/runners/memory-budget.js';
import { planMemory, type MemoryPlan, type MemoryPlanInput } from '../../src/engine/runners/runner-plan.js';
import type { ModelDtype } from '../../src/engine/model/model-files.js';

export type PlanInput = MemoryPlanInput;

const planned = (input: PlanInput): MemoryPlan | undefined => {
  try {
    return planMemory(input);
  } catch {
    return undefined;
  }
};

const tokensOf = (input: PlanInput, plan: MemoryPlan): number =>
  Math.floor(plan.kvCacheBytes / kvBytesPerToken(input.config, input.kvDtype));

/** The stages the fewest a pipeline takes at most (a stage per layer beyond that gains nothing here). */
const MAX_STAGES = 32;

/**
 * Settings that would serve the model within the budget, each alone, in the order to try them: the KV pool's
 * element type (the kernels' 8-bit rows hold 3.76x fp32's tokens at head_dim 64), fewer shards in the isolate,
 * the folder's other weights, and pipeline stages (each stage Worker holds about 1/N of the weights and of the KV
 * pool; each checks MEMORY_BUDGET_MB when it loads, so N is the fewest that plan says fit).
 */
export function fittingSettings(
  input: PlanInput,
  otherWeights: readonly { dtype: ModelDtype; bytes: number | undefined }[],
): string[] {
  const out: string[] = [];
  const kernels = input.runner === 'kernels';
  if (kernels)
    for (const kvDtype of ['int8', 'fp16'] as const) {
      if (kvDtype === input.kvDtype) continue;
      const plan = planned({ ...input, kvDtype });
      if (plan) {
        const perShard = `${tokensOf({ ...input, kvDtype }, plan)} KV tokens per shard`;
        out.push(`KV_DTYPE=${kvDtype} (${mib(plan.totalBytes)}, ${input.engines} shard(s), ${perShard})`);
        break;
      }
    }
  for (let n = input.engines - 1; n >= 1; n--) {
    const plan = planned({ ...input, engines: n });
    if (plan) {
      out.push(`SHARD_COUNT=${n} (${mib(plan.totalBytes)})`);
      break;
    }
  }
  for (const w of otherWeights) {
    if (w.bytes === undefined) continue;
    const plan = planned({ ...input, dtype: w.dtype, weightBytes: w.bytes });
    if (plan) out.push(`MODEL_DTYPE=${w.dtype} (${mib(plan.totalBytes)})`);
  }
  if (kernels)
    for (let n = 2; n <= Math.min(MAX_STAGES, input.config.numLayers); n++) {
      const stage: PlanInput = {
        ...input,
        weightBytes: Math.ceil(input.weightBytes / n),
        limits: { ...input.limits, kvCacheBytes: Math.ceil(input.limits.kvCacheBytes / n) },
      };
      const plan = planned(stage);
      if (plan) {
        out.push(
          `PIPELINE_STAGES=${n} (about ${mib(stage.weightBytes)} of weights and 1/${n} of the KV pool on each stage Worker, ~${mib(plan.totalBytes)} each; each checks MEMORY_BUDGET_MB when it loads)`,
        );
        break;
      }
    }
  return out;
}

/** The KV pool each shard will get, in bytes and tokens, and why it is less than KV_CACHE_MB where it is. */
export function kvLine(input: PlanInput, poolBytes: number): string {
  const perToken = kvBytesPerToken(input.config, input.kvDtype);
  const tokens = Math.floor(poolBytes / perToken);
  const asked = input.limits.kvCacheBytes;
  const head = `kv        ${mib(poolBytes)} per shard at ${input.kvDtype}, ${tokens} tokens`;
  // A pool is whole blocks: within a block of KV_CACHE_MB, it is what was asked for.
  if (poolBytes > asked - input.limits.blockSize * perToken)
    return `${head} (KV_CACHE_MB ${asked / 2 ** 20}, in whole blocks of ${input.limits.blockSize} tokens)`;
  const more =
    input.runner === 'kernels' && input.kvDtype !== 'int8'
      ? `; KV_DTYPE=int8 holds ${(perToken / kvBytesPerToken(input.config, 'int8')).toFixed(2)}x the tokens in the same bytes`
      : '';
  return `${head}: not KV_CACHE_MB ${asked / 2 ** 20}, which ${input.engines} shard(s) and the rest do not leave room for within MEMORY_BUDGET_MB${more}`;
}

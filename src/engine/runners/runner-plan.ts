// What serving a model will take, known before its weights are read: the runner loadRunner will pick and
// the memory the budget will count. `npm start` reports it (and refuses what cannot load) before wrangler dev
// starts, and /v1/models shows the runner before a shard has loaded the model. The terms are the load's own
// (create-runner.ts, isolate-pool.ts, memory-budget.ts), so the plan and the load cannot disagree on a rule.
import type { ModelDtype } from '../model/model-files.js';
import type { OrtRuntime } from '../model/runtime.js';

export type RunnerKind = 'kernels' | 'onnxruntime';

/**
 * The runner loadRunner picks for `dtype` on `runtime`, from what is known before the graph is read: GGUF and
 * a runtime with our kernels (unless forced to onnxruntime) go to the kernels, the rest to onnxruntime. The
 * kernels run Llama graphs; a graph of another model_type is planned on onnxruntime where the runtime has it.
 * A Llama graph the kernels turn out not to cover falls back when it loads: the loaded runner says so.
 * Over pipeline stages (`pipeline`) the layers run on the stages' kernels and the head's ends on its own.
 */
export function plannedRunner(
  runtime: Pick<OrtRuntime, 'kernels' | 'hasOnnxruntime' | 'runner'> & { gpu?: unknown },
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

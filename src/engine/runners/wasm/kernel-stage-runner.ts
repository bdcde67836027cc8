import type { EngineLimits } from '../../defaults.js';
import type { StepLogits } from '../model-runner.js';
import type { KernelRow } from './kernel-pass.js';
import type { KernelModel } from './kernel-model.js';
import { KernelRunner } from './kernel-runner.js';

/**
 * Our kernels as a pipeline stage, or as the head of a model split over stages, runs them: the whole-model
 * runner plus the entry points that take and give hidden states (a stage's layers, a vocabulary stage's rows
 * of the embedding and the output projection, the head's logits from the last stage's output).
 */
export class KernelStageRunner extends KernelRunner {
  /** A stage's (or the head's) runner over `model`'s shared weights; the shared scratch grows to what its limits need. */
  static override over(model: KernelModel, limits: EngineLimits): KernelStageRunner {
    return new KernelStageRunner(model, limits);
  }

  /**
   * One pipeline stage's share of a pass: the hidden states entering this memory's first layer ((M, hidden),
   * every row's tokens end to end), or the token ids where this memory holds the embedding; returns the
   * hidden states leaving its last layer, copied out of scratch. Its layers' keys and values are written into
   * the rows' blocks (the head checked they are the rows' own).
   */
  forwardHidden(rows: readonly KernelRow[], input: Float32Array | readonly number[]): Float32Array {
    const pass = this.begin(rows, false);
    if (input instanceof Float32Array) this.setResidual(pass, input);
    else this.embedTokens(pass, input);
    this.runLayers(pass);
    return this.memory.f32(pass.scratch.residual, pass.tokens * this.config.hiddenSize).slice();
  }

  /**
   * A vocabulary stage's share of an embedding: the rows of `ids` (all among this memory's vocabulary rows),
   * (ids, hidden) float32.
   */
  embedRows(ids: readonly number[]): Float32Array {
    const pass = this.begin([{ blocks: [], start: 0, count: ids.length }], false);
    this.embedTokens(pass, ids);
    return this.memory.f32(pass.scratch.residual, ids.length * this.config.hiddenSize).slice();
  }

  /**
   * A vocabulary stage's share of the logits: the final norm and this memory's rows of the output projection
   * over `count` positions' hidden states ((count, hidden), the model's last layer's output), as
   * (count, rows) float32. Each logit is the same dot product the whole table's pass computes.
   */
  vocabLogits(hidden: Float32Array, count: number): Float32Array {
    const pass = this.begin(
      Array.from({ length: count }, () => ({ blocks: [], start: 0, count: 1 })),
      true,
    );
    this.setResidual(pass, hidden);
    const logits = this.outputLogits(pass);
    const width = this.weights.ends!.lmHead.n;
    const out = new Float32Array(count * width);
    for (let i = 0; i < count; i++) out.set(logits.last(i), i * width);
    return out;
  }

  /** The head's end of a pass over stages: the hidden states leaving the model's last layer, to logits. */
  logitsFromHidden(rows: readonly KernelRow[], hidden: Float32Array): StepLogits {
    const pass = this.begin(rows, true);
    this.setResidual(pass, hidden);
    return this.outputLogits(pass);
  }
}

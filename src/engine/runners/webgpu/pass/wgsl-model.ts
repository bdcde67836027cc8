import type { EngineLimits } from '../../../defaults.js';
import type { ModelConfig } from '../../../model/config.js';
import type { ByteStream } from '../../../model/model-files.js';
import type { MemoryBudget } from '../../memory-budget.js';
import { KernelModel } from '../../wasm/kernel-model.js';
import type { WgslKernels } from '../wgsl-kernels.js';
import { GpuAdapterStore } from './gpu-adapters.js';
import { uploadWeights, weightBuffers, type GpuWeights } from './gpu-weights.js';
import { createPassPipelines, type PassPipelines } from './pipelines.js';

/**
 * A model on our own WGSL forward pass: its weights on the device (uploaded once, in their stored form) and
 * the pass's compiled kernels. Shared by every engine serving the model (a WgslRunner each, its own KV pool).
 */
export class WgslModel {
  /** LoRA adapters uploaded to the device, each once for every runner of the model. */
  readonly adapters: GpuAdapterStore;

  private constructor(
    readonly device: GPUDevice,
    readonly config: ModelConfig,
    readonly weights: GpuWeights,
    readonly pipelines: PassPipelines,
    /** The sampling kernels (greedy.wgsl, sample.wgsl), where tokens are drawn on the device. */
    readonly sampling: WgslKernels | undefined,
  ) {
    this.adapters = new GpuAdapterStore(device);
  }

  /**
   * Reads a weights file with the kernels' loaders (GGUF's blocks repacked losslessly into kernels/quant.h's
   * planes, in a WebAssembly memory of the kernels' module), uploads every tensor, and lets that memory go.
   */
  static async fromStream(
    device: GPUDevice,
    kernels: WebAssembly.Module,
    file: ByteStream,
    config: ModelConfig,
    options: {
      limits: EngineLimits;
      budget: MemoryBudget;
      format: 'onnx' | 'gguf';
      sampling?: WgslKernels;
      /** Subgroup reductions (default: where the device has them); false forces the fallback. */
      subgroups?: boolean;
    },
  ): Promise<WgslModel> {
    const staged = await KernelModel.fromStream(kernels, file, config, options);
    const weights = uploadWeights(device, staged.memory, staged.weights, config);
    const pipelines = await createPassPipelines(device, options.subgroups);
    return new WgslModel(device, config, weights, pipelines, options.sampling);
  }

  destroy(): void {
    for (const b of weightBuffers(this.weights)) b.destroy();
    this.adapters.destroy();
  }
}

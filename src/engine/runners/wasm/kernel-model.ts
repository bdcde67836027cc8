import type { EngineLimits } from '../../defaults.js';
import type { ModelConfig } from '../../model/config.js';
import type { ByteStream } from '../../model/model-files.js';
import type { MemoryBudget } from '../memory-budget.js';
import { instantiateKernels, type KernelExports } from './edge-kernels.js';
import { loadGgufWeights } from './weights/gguf/gguf-weights.js';
import { ScratchArena, type LinearMemory } from './linear-memory.js';
import { loadOnnxWeights } from './weights/onnx/onnx-weights.js';
import { KERNELS_STACK, scratchBytes } from './scratch-layout.js';
import { wholeModel, type LayerSpan, type LlamaWeights } from './weights/llama-weights.js';

/**
 * A model's weights on our kernels, loaded once: the kernels' instance, its linear memory, the weights in
 * it and the scratch every pass uses. Read-only once loaded, so every engine of an isolate that serves the
 * model shares it (a runner each: its own KV pool in the same memory, the shared scratch). Kernel calls
 * are synchronous and passes never interleave, so sharing one instance and one memory is safe.
 */
export class KernelModel {
  readonly arena: ScratchArena;

  private constructor(
    readonly config: ModelConfig,
    readonly kernels: KernelExports,
    readonly memory: LinearMemory,
    readonly weights: LlamaWeights,
  ) {
    this.arena = new ScratchArena(memory);
  }

  /** What the footprint counts as scratch: the arena's, and the kernels' own stack below their heap. */
  get scratchBytes(): number {
    return this.arena.bytes + KERNELS_STACK;
  }

  /**
   * Streams a weights file into a fresh linear memory, each tensor placed where the kernels will read it
   * (converted on the way where the file's layout is not theirs): the file is never held whole, so loading
   * peaks at the weights plus one tensor's staging. The budget is checked as the weights are placed (and on a
   * GGUF file's size first). With `span`, only those layers (and ends) are placed: a pipeline stage's share.
   */
  static async fromStream(
    module: WebAssembly.Module,
    file: ByteStream,
    config: ModelConfig,
    {
      limits,
      budget,
      format = 'onnx',
      span = wholeModel(config),
    }: { limits: EngineLimits; budget: MemoryBudget; format?: 'onnx' | 'gguf'; span?: LayerSpan },
  ): Promise<KernelModel> {
    const scratch = scratchBytes(config, limits, undefined, span);
    // A GGUF file's blocks are held as they lie, so a file of known size is judged whole before anything is
    // placed; an ONNX file may hold float tables the kernels quantise, so it is judged as its weights arrive.
    if (
      format === 'gguf' &&
      file.size !== undefined &&
      span.ends &&
      !span.vocab &&
      span.from === 0 &&
      span.to === config.numLayers
    )
      budget.check([
        { label: 'weights', bytes: file.size },
        { label: 'scratch', bytes: scratch },
      ]);
    const { kernels, memory } = await instantiateKernels(module);
    const check = (placed: number): void =>
      budget.check([
        { label: 'weights (so far)', bytes: placed },
        { label: 'scratch', bytes: scratch },
      ]);
    const ctx = { memory, kernels, report: (message: string) => console.warn(`edge kernels: ${message}`) };
    const load = format === 'gguf' ? loadGgufWeights : loadOnnxWeights;
    const weights = await load(file.chunks, config, ctx, check, span);
    return new KernelModel(config, kernels, memory, weights);
  }
}

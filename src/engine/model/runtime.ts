import type { InferenceSession, Tensor } from 'onnxruntime-common';

/**
 * What the host hands the engine to run on: an ONNX runtime (onnxruntime-node's native CPU backend in Node,
 * onnxruntime-web's WASM or WebGPU backend in workerd and browsers; both speak onnxruntime-common's API),
 * our kernels' compiled WebAssembly modules and xgrammar's, and which runner to prefer. The engine imports
 * none of these itself: a host (src/backends/, src/objects/) builds this once and passes it in.
 */
export interface EngineRuntime {
  /** Human-readable backend name for metrics and logs, e.g. `cpu`, `wasm`, `webgpu`. */
  readonly name: string;
  readonly InferenceSession: {
    create(bytes: Uint8Array, options?: InferenceSession.SessionOptions): Promise<InferenceSession>;
  };
  readonly Tensor: typeof Tensor;
  /** Execution providers to ask for when creating a session. */
  readonly executionProviders: InferenceSession.SessionOptions['executionProviders'];
  /**
   * Our WebAssembly kernels (src/engine/runners/wasm/edge-kernels.wasm), compiled by the host: workerd
   * imports .wasm files precompiled, Node compiles the bytes. On a `wasm` runtime the engine runs Llama
   * graphs on them and keeps onnxruntime for the graphs they do not cover.
   */
  readonly kernels?: WebAssembly.Module;
  /**
   * The kernels build for graphs whose products are all 8-bit (dtype int8, uint8, quantized), where given:
   * baseline SIMD's int16 dot product runs those faster than relaxed SIMD's int8 one, which must widen
   * 8-bit weights first (18 against 12 GMAC/s at one row here: docs/kernels.md), while 4-bit weights run
   * faster on a relaxed build. Every build gives the same bits where it runs (the dot-add build only where V8
   * fuses its dot product: dot-lowering.ts), so the choice changes no token.
   */
  readonly kernels8Bit?: WebAssembly.Module;
  /**
   * xgrammar's WebAssembly (src/engine/constraints/xgrammar/xgrammar.wasm), compiled by the host like
   * `kernels`: structured outputs and forced tool calls. Absent: those requests are refused.
   */
  readonly grammar?: WebAssembly.Module;
  /** False in a build without onnxruntime-web (kernels-only): a graph the kernels refuse cannot fall back. */
  readonly hasOnnxruntime?: boolean;
  /** `kernels`: our kernels or an error saying why not; `onnxruntime`: never the kernels; `auto` (default): kernels where they cover the graph. */
  readonly runner?: RunnerChoice;
}

export type RunnerChoice = 'auto' | 'kernels' | 'onnxruntime';

export type OrtSession = InferenceSession;
export type OrtTensor = Tensor;

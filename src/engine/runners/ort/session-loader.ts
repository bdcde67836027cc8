import { InvalidRequestError } from '../../errors.js';
import type { ModelConfig } from '../../model/config.js';
import { describeGraphIo, type GraphIo } from './graph-io.js';
import type { EngineRuntime, OrtSession } from '../../model/runtime.js';

export interface SessionOptions {
  /** Threads for one op (native CPU backend only; WASM threads are set on its env). */
  intraOpNumThreads?: number;
}

/**
 * Creates the ONNX session for a model and reads its I/O. A graph the runtime cannot build (an operator
 * or opset it lacks, a malformed file) is refused with the runtime's reason, as an InvalidRequestError.
 * The memory budget is the runner factory's to check, before this is called.
 */
export async function loadSession(
  runtime: EngineRuntime,
  onnx: Uint8Array,
  config: ModelConfig,
  options: SessionOptions = {},
): Promise<{ session: OrtSession; io: GraphIo }> {
  let session: OrtSession;
  try {
    session = await runtime.InferenceSession.create(onnx, {
      executionProviders: runtime.executionProviders,
      graphOptimizationLevel: 'all',
      ...(options.intraOpNumThreads ? { intraOpNumThreads: options.intraOpNumThreads } : {}),
    });
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new InvalidRequestError(
      'model',
      `the ${runtime.name} backend cannot run the model's ONNX graph: ${reason}`,
      'unsupported_model',
    );
  }
  try {
    return { session, io: describeGraphIo(runtime, session, config) };
  } catch (err) {
    await session.release();
    throw err;
  }
}

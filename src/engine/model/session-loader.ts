import { InvalidRequestError } from '../errors.js';
import type { ModelConfig } from './config.js';
import { kvBytesPerToken } from './config.js';
import { describeGraphIo, type GraphIo } from './graph-io.js';
import type { OrtRuntime, OrtSession } from './runtime.js';

export interface SessionOptions {
  /** Threads for one op (native CPU backend only; WASM threads are set on its env). */
  intraOpNumThreads?: number;
  /**
   * Bytes the model may use: weights (the ONNX file) plus the KV cache pool. A model past it is
   * refused before it is loaded. Unset: no limit.
   */
  memoryBudgetBytes?: number;
  /** KV pool bytes, for the budget check (the engine's default is 64 MiB). */
  kvCacheBytes?: number;
}

const MiB = 2 ** 20;
/** Bytes as MiB with one decimal, for messages. */
export const mib = (n: number): string => `${(n / MiB).toFixed(1)} MiB`;

/** Refuses a model whose weights and KV pool together exceed the budget, saying what would fit. */
export function checkMemoryBudget(weightBytes: number, config: ModelConfig, kvCacheBytes: number, budgetBytes: number | undefined): void {
  if (budgetBytes === undefined || weightBytes + kvCacheBytes <= budgetBytes) return;
  const perToken = kvBytesPerToken(config);
  const room = budgetBytes - weightBytes;
  const advice =
    room > 0
      ? `a KV cache of at most ${mib(room)} (${Math.floor(room / perToken)} tokens at ${perToken} B/token) would fit`
      : 'the weights alone do not fit: use a smaller or more quantised variant (MODEL_DTYPE q4 / int8)';
  throw new InvalidRequestError(
    'model',
    `the model does not fit the memory budget: weights ${mib(weightBytes)} + KV cache ${mib(kvCacheBytes)} = ${mib(weightBytes + kvCacheBytes)} > budget ${mib(budgetBytes)}; ${advice}`,
    'model_too_large',
  );
}

/**
 * Creates the ONNX session for a model and reads its I/O. A graph the runtime cannot build (an operator
 * or opset it lacks, a malformed file) is refused with the runtime's reason, as an InvalidRequestError.
 */
export async function loadSession(runtime: OrtRuntime, onnx: Uint8Array, config: ModelConfig, options: SessionOptions = {}): Promise<{ session: OrtSession; io: GraphIo }> {
  checkMemoryBudget(onnx.byteLength, config, options.kvCacheBytes ?? 64 * MiB, options.memoryBudgetBytes);
  let session: OrtSession;
  try {
    session = await runtime.InferenceSession.create(onnx, {
      executionProviders: runtime.executionProviders,
      graphOptimizationLevel: 'all',
      ...(options.intraOpNumThreads ? { intraOpNumThreads: options.intraOpNumThreads } : {}),
    });
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new InvalidRequestError('model', `the ${runtime.name} backend cannot run the model's ONNX graph: ${reason}`, 'unsupported_model');
  }
  try {
    return { session, io: describeGraphIo(runtime, session, config) };
  } catch (err) {
    await session.release();
    throw err;
  }
}

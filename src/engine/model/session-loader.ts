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
  /** The weights' format (fp16 weights cost onnxruntime-web more than twice their file). */
  dtype?: string;
}

const MiB = 2 ** 20;
/** Bytes as MiB with one decimal, for messages. */
export const mib = (n: number): string => `${(n / MiB).toFixed(1)} MiB`;

/** One part of a runner's footprint besides the KV pool, named for the message: weights, scratch, ... */
export interface FootprintPart {
  label: string;
  bytes: number;
}

/** Refuses a model whose footprint (its parts and the KV pool) exceeds the budget, saying what would fit. */
export function checkMemoryBudget(
  parts: readonly FootprintPart[],
  config: ModelConfig,
  kvCacheBytes: number,
  budgetBytes: number | undefined,
  perToken = kvBytesPerToken(config),
): void {
  const fixed = parts.reduce((n, p) => n + p.bytes, 0);
  if (budgetBytes === undefined || fixed + kvCacheBytes <= budgetBytes) return;
  const room = budgetBytes - fixed;
  const advice =
    room > 0
      ? `a KV cache of at most ${mib(room)} (${Math.floor(room / perToken)} tokens at ${perToken} B/token) would fit`
      : 'the weights alone do not fit: use a smaller or more quantised variant (MODEL_DTYPE q4 / int8)';
  const terms = parts.map((p) => `${p.label} ${mib(p.bytes)}`).join(' + ');
  throw new InvalidRequestError(
    'model',
    `the model does not fit the memory budget: ${terms} + KV cache ${mib(kvCacheBytes)} = ${mib(fixed + kvCacheBytes)} > budget ${mib(budgetBytes)}; ${advice}`,
    'model_too_large',
  );
}

/**
 * What onnxruntime-web holds besides the KV pool, measured (process RSS around InferenceSession.create, plus
 * the file the engine holds, bench-135m): 110 MiB for the runtime itself (a 0.5 MB model adds 111 MiB),
 * and about 3.3x the file for q4, 3.0x int8, 2.5x fp32, 6.1x fp16 (its weights cast to float32 beside the
 * halves). Other runtimes (onnxruntime-node) are counted by their file alone: not measured.
 */
export function onnxruntimeFootprint(runtime: OrtRuntime, fileBytes: number, halfWeights = false): FootprintPart[] {
  if (runtime.name !== 'wasm') return [{ label: 'weights', bytes: fileBytes }];
  return [
    { label: 'weights', bytes: fileBytes },
    {
      label: `onnxruntime-web (110 MiB + ${halfWeights ? '5.5' : '2.5'}x the weights)`,
      bytes: 110 * MiB + fileBytes * (halfWeights ? 5.5 : 2.5),
    },
  ];
}

/**
 * Creates the ONNX session for a model and reads its I/O. A graph the runtime cannot build (an operator
 * or opset it lacks, a malformed file) is refused with the runtime's reason, as an InvalidRequestError.
 */
export async function loadSession(
  runtime: OrtRuntime,
  onnx: Uint8Array,
  config: ModelConfig,
  options: SessionOptions = {},
): Promise<{ session: OrtSession; io: GraphIo }> {
  checkMemoryBudget(
    onnxruntimeFootprint(runtime, onnx.byteLength, options.dtype === 'fp16'),
    config,
    options.kvCacheBytes ?? 64 * MiB,
    options.memoryBudgetBytes,
  );
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

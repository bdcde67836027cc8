import { InvalidRequestError } from '../errors.js';
import { kvBytesPerToken, type ModelConfig } from '../model/config.js';

const MiB = 2 ** 20;
/** Bytes as MiB with one decimal, for messages. */
export const mib = (n: number): string => `${(n / MiB).toFixed(1)} MiB`;

/** One part of a runner's footprint besides the KV pool, named for the message: weights, scratch, ... */
export interface FootprintPart {
  label: string;
  bytes: number;
}

/**
 * The bytes a model may use (MEMORY_BUDGET_MB): its parts (weights, scratch, a runtime's own copies) plus
 * the KV pool, and what the isolate holds besides (`besides`: isolateFootprint, where the budget stands for
 * a Workers isolate). Runners check their footprint against it before they place anything, and again as
 * weights arrive from a source that could not say their size.
 */
export class MemoryBudget {
  /** Bytes a token of KV takes, for the advice on what would fit. */
  private readonly perToken: number;

  constructor(
    config: ModelConfig,
    private readonly kvCacheBytes: number,
    /** Undefined: no limit. */
    readonly budgetBytes: number | undefined,
    /** Parts every check counts besides the runner's own. */
    private readonly besides: readonly FootprintPart[] = [],
  ) {
    this.perToken = kvBytesPerToken(config);
  }

  /** Whether `bytes` more, with what is held besides and the KV pool, are within the budget. */
  fits(bytes: number): boolean {
    const besides = this.besides.reduce((n, p) => n + p.bytes, 0);
    return this.budgetBytes === undefined || bytes + besides + this.kvCacheBytes <= this.budgetBytes;
  }

  /** Refuses a footprint (its parts, what is held besides, and the KV pool) past the budget, saying what would fit. */
  check(runnerParts: readonly FootprintPart[]): void {
    const parts = [...runnerParts, ...this.besides];
    const fixed = parts.reduce((n, p) => n + p.bytes, 0);
    const { budgetBytes, kvCacheBytes, perToken } = this;
    if (budgetBytes === undefined || fixed + kvCacheBytes <= budgetBytes) return;
    const room = budgetBytes - fixed;
    const terms = parts.map((p) => `${p.label} ${mib(p.bytes)}`).join(' + ');
    const advice =
      room > 0
        ? `a KV cache of at most ${mib(room)} (${Math.floor(room / perToken)} tokens at ${perToken} B/token) would fit`
        : // Not "the weights": they may be a small part of it (scratch and the isolate grow with the vocabulary).
          `these parts already take ${mib(fixed)} before any KV cache: only less of them fits (smaller weights: MODEL_DTYPE q4 / int8; fewer shards: SHARD_COUNT; the layers over stage Workers: PIPELINE_STAGES), or a larger budget`;
    throw new InvalidRequestError(
      'model',
      `the model does not fit the memory budget: ${terms} + KV cache ${mib(kvCacheBytes)} = ${mib(fixed + kvCacheBytes)} > budget ${mib(budgetBytes)}; ${advice}`,
      'model_too_large',
    );
  }
}

/**
 * What a Workers isolate holds besides a runner's memory, as measured in workerd through the inspector (JS
 * heap + ArrayBuffers + xgrammar's WebAssembly memories; scripts/bench/edge-memory.ts, docs/models.md
 * "Memory in the isolate"): the code and the service, a cost per vocabulary entry (the tokenizer's maps,
 * the token bytes, the sampler's shared rows, xgrammar's tokenizer tables once a grammar is used) and a
 * cost per concurrent stream. bench-135m q4 with a 49,152-token tokenizer measured 8.2 MiB loaded, 9.4
 * under 16 streams and 13.3 once a grammar was compiled; a 512-token model 5.0 after 16 streams and a grammar
 * (test/e2e/model-url.test.ts holds the isolate to this part).
 */
export function isolateFootprint(vocabSize: number, maxStreams: number): FootprintPart {
  const bytes = ISOLATE_BASE_BYTES + vocabSize * ISOLATE_BYTES_PER_VOCAB_ENTRY + maxStreams * ISOLATE_BYTES_PER_STREAM;
  return { label: 'isolate besides the runner (JS heap, buffers, xgrammar)', bytes };
}

/**
 * isolateFootprint split for an isolate whose engines share one model: the code, the service and the
 * tokenizer once (`shared`), and per engine its own JS state, xgrammar instance and streams (`perEngine`).
 */
export function sharedIsolateFootprint(vocabSize: number): FootprintPart {
  const bytes = ISOLATE_BASE_BYTES + vocabSize * ISOLATE_BYTES_PER_VOCAB_ENTRY;
  return { label: 'isolate besides the runners (code, JS heap, tokenizer)', bytes };
}

export function engineIsolateFootprint(vocabSize: number, maxStreams: number): FootprintPart {
  const bytes = ENGINE_BASE_BYTES + vocabSize * ENGINE_BYTES_PER_VOCAB_ENTRY + maxStreams * ISOLATE_BYTES_PER_STREAM;
  return { label: 'its JS state, grammars and streams', bytes };
}

/**
 * Measured (docs/models.md, "Memory in the isolate"); rounded up. 2026-12-03, 5.7 MiB of
 * JS heap with a 512-entry vocabulary after streams and a grammar (test/e2e/model-url.test.ts), up from under
 * 4.7 once the tokenizer kept the decoder's text of added tokens and the compact tables' code; 2026-12-05, 6.0
 * once the Responses and Conversations APIs, tenancy and the GPU host's client joined the service (the WebGPU
 * runners, which a Workers isolate cannot run, left its bundle: webgpu/device-runners.ts); 2026-12-06, 6.5 (7.3
 * besides the kernels, with xgrammar's two memories) once embeddings, LoRA adapters and reasoning joined it. With
 * that base, 180 B an entry (190 before) still covers bench-135m's 13.3 MiB with a grammar (15.9 counted) and
 * keeps its part under 16 MiB.
 */
const ISOLATE_BASE_BYTES = 6 * MiB;
const ISOLATE_BYTES_PER_VOCAB_ENTRY = 180;
const ISOLATE_BYTES_PER_STREAM = 96 * 1024;
/** Each further engine of an isolate (an object's state, SQLite, sampler, its own xgrammar tables). */
const ENGINE_BASE_BYTES = MiB;
const ENGINE_BYTES_PER_VOCAB_ENTRY = 64;

/**
 * What onnxruntime-web holds besides the KV pool, measured (process RSS around InferenceSession.create, plus
 * the file the engine holds, bench-135m): 110 MiB for the runtime itself (a 0.5 MB model adds 111 MiB),
 * and about 3.3x the file for q4, 3.0x int8, 2.5x fp32, 6.1x fp16 (its weights cast to float32 beside the
 * halves). Other runtimes (onnxruntime-node) are counted by their file alone: not measured.
 */
export function onnxruntimeFootprint(runtimeName: string, fileBytes: number, halfWeights = false): FootprintPart[] {
  if (runtimeName !== 'wasm') return [{ label: 'weights', bytes: fileBytes }];
  return [
    { label: 'weights', bytes: fileBytes },
    {
      label: `onnxruntime-web (110 MiB + ${halfWeights ? '5.5' : '2.5'}x the weights)`,
      bytes: 110 * MiB + fileBytes * (halfWeights ? 5.5 : 2.5),
    },
  ];
}

/** A pipeline stage's isolate besides its kernels' memory: the code and the stage objects' JS state (no tokenizer). */
export function stageIsolateFootprint(): FootprintPart {
  return { label: 'isolate besides the kernels (code, JS heap)', bytes: ISOLATE_BASE_BYTES };
}

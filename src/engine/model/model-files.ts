import { InvalidRequestError } from '../errors.js';
import { parseModelConfig, type ModelConfig } from './config.js';

/**
 * Where model files come from. Only bytes cross this boundary, so a folder on disk, an R2 bucket and
 * static assets all serve the same loader. `read` answers null for a file that does not exist.
 */
export interface ModelSource {
  read(path: string): Promise<Uint8Array | null>;
  /**
   * The file's bytes as they arrive, for files too big to hold twice (the weights: the edge kernels
   * stream them straight into linear memory). Null for a missing file. Optional: sources without it are read whole.
   */
  stream?(path: string): Promise<ByteStream | null>;
  /**
   * Whether the file exists, without reading it (a stat, an R2 head, an HTTP HEAD): how the default
   * weights are found. Optional: sources without it are asked with `read`.
   */
  exists?(path: string): Promise<boolean>;
  /**
   * Where this folder is, for messages (`static assets models/tiny/`, `R2 edge-infer-models/tiny/`): never a
   * URL that may hold a token. With `fix`, what to do when the folder is not there.
   */
  where?: string;
  fix?: string;
}

/** Whether `path` exists in `source`: its own check where it has one, else a read. */
export async function fileExists(source: ModelSource, path: string): Promise<boolean> {
  return source.exists ? source.exists(path) : (await source.read(path)) !== null;
}

/** A file as it arrives, and its size when the source knows it (to check a memory budget before loading). */
export interface ByteStream {
  chunks: AsyncIterable<Uint8Array> | SeekableChunks;
  size?: number;
}

/**
 * Chunks of a file that can also start anywhere (a ranged read: R2's range, HTTP's Range, a file offset), so a
 * reader skipping a long run of bytes it does not use (another pipeline stage's layers) does not fetch them.
 */
export interface SeekableChunks extends AsyncIterable<Uint8Array> {
  from(offset: number): AsyncIterable<Uint8Array>;
}

/** `chunks` that start anywhere with `from`. */
export function seekable(
  chunks: AsyncIterable<Uint8Array>,
  from: (offset: number) => AsyncIterable<Uint8Array>,
): SeekableChunks {
  return { [Symbol.asyncIterator]: () => chunks[Symbol.asyncIterator](), from };
}

/** Skips shorter than this are read through: a ranged read costs a round trip. */
export const SEEK_MIN_BYTES = 1 << 20;

/**
 * Where a reader that is skipping `n` bytes at `position` (its chunk holding `buffered` of them) should read on
 * from a ranged read instead: the new chunks, or undefined to read through.
 */
export function seekPast(
  source: AsyncIterable<Uint8Array>,
  position: number,
  n: number,
  buffered: number,
  seekMin = SEEK_MIN_BYTES,
): AsyncIterator<Uint8Array> | undefined {
  if (n - buffered < seekMin || !('from' in source)) return undefined;
  return (source as SeekableChunks).from(position + n)[Symbol.asyncIterator]();
}

/** Bytes already whole, as a stream of one chunk. */
export async function* oneChunk(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  yield bytes;
}

/** A web ReadableStream as chunks; leaving early cancels it, so nothing is left half read. */
export async function* readableChunks(stream: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = stream.getReader();
  let done = false;
  try {
    for (;;) {
      const next = await reader.read();
      if (next.done) {
        done = true;
        return;
      }
      yield next.value;
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}

/**
 * Weight formats a model folder may hold; each is its own graph with the same inputs and outputs. The
 * first four are what model:make and model:import write; the others are onnx-community's export names
 * (q4f16: 4-bit weights with fp16 activations and KV; uint8 / quantized: 8-bit dynamic quantisation; bnb4).
 */
export type ModelDtype = 'fp32' | 'fp16' | 'int8' | 'q4' | 'q4f16' | 'uint8' | 'quantized' | 'bnb4' | 'gguf';
/** File name of each variant inside `onnx/`, as transformers.js names them. */
export function onnxFileFor(dtype: ModelDtype): string {
  return dtype === 'fp32' ? 'onnx/model.onnx' : `onnx/model_${dtype}.onnx`;
}

/** The folder's weights file for `dtype`: an ONNX variant, or `gguf`, the GGUF file config.json names (gguf_file). */
export function weightsFileFor(dtype: ModelDtype, rawConfig: Record<string, unknown> = {}): string {
  if (dtype !== 'gguf') return onnxFileFor(dtype);
  return typeof rawConfig.gguf_file === 'string' ? rawConfig.gguf_file : 'model.gguf';
}

export interface ModelFiles {
  config: ModelConfig;
  rawConfig: Record<string, unknown>;
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  onnx: Uint8Array;
  dtype: ModelDtype;
}

/** The refusal for a missing file, saying where it was looked for and (for config.json, the folder itself) what to do. */
export function missingFile(source: ModelSource, path: string): InvalidRequestError {
  const where = source.where ? ` in ${source.where}` : '';
  const fix = path === 'config.json' && source.fix ? `: ${source.fix}` : '';
  const what =
    path === 'config.json'
      ? `no model folder: config.json is missing${where}`
      : `model file ${path} is missing${where}`;
  return new InvalidRequestError('model', `${what}${fix}`, 'model_not_found');
}

async function required(source: ModelSource, path: string): Promise<Uint8Array> {
  const bytes = await source.read(path);
  if (!bytes) throw missingFile(source, path);
  return bytes;
}

async function json(source: ModelSource, path: string, optional = false): Promise<Record<string, unknown>> {
  const bytes = optional ? await source.read(path) : await required(source, path);
  if (!bytes) return {};
  return JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
}

/** Everything of a model folder but its weights: config and tokenizer (small JSON files). */
export async function loadModelMeta(source: ModelSource): Promise<Omit<ModelFiles, 'onnx' | 'dtype'>> {
  const [rawConfig, generationConfig, tokenizerJson, tokenizerConfig] = await Promise.all([
    json(source, 'config.json'),
    json(source, 'generation_config.json', true),
    json(source, 'tokenizer.json'),
    json(source, 'tokenizer_config.json'),
  ]);
  return { config: parseModelConfig(rawConfig, generationConfig), rawConfig, tokenizerJson, tokenizerConfig };
}

/** One ONNX variant's bytes, whole. */
export function readOnnx(source: ModelSource, dtype: ModelDtype): Promise<Uint8Array> {
  return required(source, onnxFileFor(dtype));
}

/** A weights file's bytes as they arrive (whole, for a source that cannot stream). */
export async function streamWeights(source: ModelSource, path: string): Promise<ByteStream> {
  if (!source.stream) {
    const bytes = await required(source, path);
    return { chunks: oneChunk(bytes), size: bytes.length };
  }
  const stream = await source.stream(path);
  if (!stream) throw missingFile(source, path);
  return stream;
}

/** Loads a Hugging Face-layout model folder (config, tokenizer and one ONNX variant) from any source. */
export async function loadModelFiles(source: ModelSource, dtype: ModelDtype = 'fp32'): Promise<ModelFiles> {
  const [meta, onnx] = await Promise.all([loadModelMeta(source), readOnnx(source, dtype)]);
  return { ...meta, onnx, dtype };
}

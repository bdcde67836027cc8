// `model:import -- gguf <file.gguf> --out <dir>`: a llama.cpp GGUF file -> our model folder. The weights are
// not converted: the file is copied in unchanged as `model.gguf`, which the kernels' loader streams into
// linear memory block by block (quantised blocks stay quantised). Only its header is read here, to write
// the JSON files the server reads beside it:
//   config.json              LlamaConfig keys from the llama.* metadata and the tensor table
//   generation_config.json   bos / eos (llama.cpp's end-of-generation tokens), max_length = context length
//   tokenizer.json           from tokenizer.ggml.* (gguf-tokenizer.ts)
//   tokenizer_config.json    bos / eos / add_bos, chat_template from tokenizer.chat_template
//   modules.json, 1_Pooling/config.json   an embedding model's <arch>.pooling_type, as sentence-transformers declares it
import { copyFileSync, createReadStream, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseGgufHeader, type GgufHeader } from '../../src/engine/formats/gguf/gguf-header.js';
import { ChunkByteReader } from '../../src/engine/formats/gguf/byte-reader.js';
import { ggufConfigJson, ggufLlamaShape } from './gguf-config.js';
import { ggufTokenizerFiles } from './gguf-tokenizer.js';

export const GGUF_FILE = 'model.gguf';

/** The header of a GGUF file on disk, read as a stream (the file may be gigabytes). */
export async function readGgufFileHeader(path: string): Promise<GgufHeader> {
  const stream = createReadStream(path, { highWaterMark: 1 << 20 });
  try {
    return await parseGgufHeader(new ChunkByteReader(stream));
  } catch (e) {
    throw new Error(`${path}: ${(e as Error).message}`);
  } finally {
    stream.destroy();
  }
}

export interface GgufFolderFiles {
  config: Record<string, unknown>;
  generationConfig: Record<string, unknown>;
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  /** sentence-transformers' declaration of the GGUF's `<arch>.pooling_type` (an embedding model's), if it has one. */
  pooling?: { modules: Record<string, unknown>[]; config: Record<string, unknown> };
}

/**
 * llama.cpp's pooling types (LLAMA_POOLING_TYPE_MEAN 1, CLS 2, LAST 3) as sentence-transformers declares them,
 * with its Normalize module: llama.cpp's server and llama-embedding L2-normalise embeddings by default.
 * NONE (0) and RANK (4, rerankers) declare nothing: the decoder default (last token, normalised) applies.
 */
const POOLING_KEYS: Record<number, string> = {
  1: 'pooling_mode_mean_tokens',
  2: 'pooling_mode_cls_token',
  3: 'pooling_mode_lasttoken',
};

function ggufPooling(header: GgufHeader, hiddenSize: number): GgufFolderFiles['pooling'] {
  const arch = header.metadata.str('general.architecture');
  const key = POOLING_KEYS[header.metadata.u32(`${arch}.pooling_type`, 0)];
  if (!key) return undefined;
  return {
    modules: [
      { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
      { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
      { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' },
    ],
    config: { word_embedding_dimension: hiddenSize, [key]: true },
  };
}

/** The folder's JSON files from a GGUF header; throws naming what the engine cannot serve. */
export function ggufFolderFiles(header: GgufHeader): GgufFolderFiles {
  const shape = ggufLlamaShape(header);
  const tok = ggufTokenizerFiles(header.metadata, shape.contextLength);
  const eos = tok.eosTokenIds[0] ?? null;
  return {
    config: ggufConfigJson(shape, tok.bosTokenId, eos),
    generationConfig: {
      bos_token_id: tok.bosTokenId,
      do_sample: false,
      eos_token_id: tok.eosTokenIds,
      max_length: shape.contextLength,
    },
    tokenizerJson: tok.tokenizerJson,
    tokenizerConfig: tok.tokenizerConfig,
    pooling: ggufPooling(header, shape.hiddenSize),
  };
}

/** Writes the folder's JSON files beside its GGUF file; returns them with their sizes. */
export function writeGgufFolderFiles(outDir: string, files: GgufFolderFiles): { file: string; bytes: number }[] {
  mkdirSync(outDir, { recursive: true });
  const put = (file: string, value: unknown) => {
    const text = `${JSON.stringify(value, null, 2)}\n`;
    writeFileSync(join(outDir, file), text);
    return { file, bytes: Buffer.byteLength(text) };
  };
  return [
    put('config.json', files.config),
    put('generation_config.json', files.generationConfig),
    put('tokenizer.json', files.tokenizerJson),
    put('tokenizer_config.json', files.tokenizerConfig),
    ...(files.pooling ? writePooling(outDir, files.pooling, put) : []),
  ];
}

function writePooling(
  outDir: string,
  pooling: NonNullable<GgufFolderFiles['pooling']>,
  put: (file: string, value: unknown) => { file: string; bytes: number },
): { file: string; bytes: number }[] {
  mkdirSync(join(outDir, '1_Pooling'), { recursive: true });
  return [put('modules.json', pooling.modules), put('1_Pooling/config.json', pooling.config)];
}

/** Writes the folder; returns the files written with their sizes. Nothing is written for a refused file. */
export async function importGguf(path: string, outDir: string): Promise<{ file: string; bytes: number }[]> {
  const written = writeGgufFolderFiles(outDir, ggufFolderFiles(await readGgufFileHeader(path)));
  copyFileSync(path, join(outDir, GGUF_FILE));
  return [...written, { file: GGUF_FILE, bytes: statSync(path).size }];
}

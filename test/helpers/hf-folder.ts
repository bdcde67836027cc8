// Writes a small Hugging Face Llama-family folder the way transformers saves one: config.json (the config
// class's keys for the shape's architecture, as the hub's Qwen2.5 / Qwen3 / Gemma 3 configs have them), sharded
// safetensors (nn.Linear weights as (out, in), biases and norms as they are) with model.safetensors.index.json,
// tokenizer files. Shares no code with scripts/import.
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { llamaConfigJson, type LlamaShape } from '../../scripts/model/presets.js';
import { makeWeights } from '../../scripts/model/weights.js';
import type { Tensor } from '../reference/onnx-weights.js';

type Dtype = 'F32' | 'BF16';

/** bfloat16 bits of v, rounded to nearest even. */
function bf16Bits(v: number): number {
  const u = new Uint32Array(Float32Array.of(v).buffer)[0];
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}
const fromBf16 = (bits: number) => new Float32Array(Uint32Array.of(bits << 16).buffer)[0];

function safetensors(tensors: { name: string; dtype: Dtype; shape: number[]; data: Float32Array }[]): Buffer {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  const blobs: Buffer[] = [];
  let offset = 0;
  for (const t of tensors) {
    const blob = Buffer.alloc(t.data.length * (t.dtype === 'F32' ? 4 : 2));
    for (const [i, v] of t.data.entries()) {
      if (t.dtype === 'F32') blob.writeFloatLE(v, i * 4);
      else blob.writeUInt16LE(bf16Bits(v), i * 2);
    }
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + blob.length] };
    offset += blob.length;
    blobs.push(blob);
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8 !== 0) json += ' '; // the format pads the header with spaces
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, Buffer.from(json), ...blobs]);
}

export interface HfFolderOptions {
  /** Tensors beyond the shape's (vectors, or matrices in (in, out) layout), as a checkpoint may hold. */
  extra?: Map<string, Tensor>;
}

/**
 * config.json as transformers writes it for the shape's architecture: presets.ts's keys, less and plus what the
 * hub's checkpoints show. Qwen2Config has no head_dim (hidden / heads) and Qwen2.5 saves a sliding_window it
 * does not use; Gemma 3's configs leave tie_word_embeddings to Gemma3TextConfig's default (tied) and keep the
 * layer pattern beside layer_types.
 */
function transformersConfig(shape: LlamaShape): Record<string, unknown> {
  const config: Record<string, unknown> = { ...llamaConfigJson(shape), torch_dtype: 'bfloat16' };
  if (shape.architecture === 'qwen2') {
    delete config.head_dim;
    Object.assign(config, { sliding_window: shape.maxPositionEmbeddings, max_window_layers: shape.numLayers });
  }
  if (shape.architecture === 'gemma3') {
    if (shape.tieWordEmbeddings) delete config.tie_word_embeddings;
    Object.assign(config, { _sliding_window_pattern: 6, use_bidirectional_attention: false });
  }
  return config;
}

/**
 * Writes the folder; returns the weights exactly as stored (bf16-rounded where stored as BF16) in the
 * reference's (in, out) layout, so the reference computes what the checkpoint holds.
 */
export function writeHfFolder(
  dir: string,
  shape: LlamaShape,
  seed: number,
  tokenizerFrom: string,
  shards = 2,
  options: HfFolderOptions = {},
): Map<string, Tensor> {
  mkdirSync(dir, { recursive: true });
  const weights = makeWeights(shape, seed);
  for (const [name, t] of options.extra ?? []) weights.set(name, t);
  const stored = new Map<string, Tensor>();
  const entries = [...weights].map(([name, { dims, data }], i) => {
    const dtype: Dtype = i % 3 === 1 ? 'BF16' : 'F32';
    const kept = dtype === 'BF16' ? data.map((v) => fromBf16(bf16Bits(v))) : data.slice();
    stored.set(name, { dims, data: kept });
    if (dims.length === 1 || name === 'model.embed_tokens.weight') return { name, dtype, shape: dims, data: kept };
    const [nIn, nOut] = dims; // to nn.Linear's (out, in)
    const t = new Float32Array(kept.length);
    for (let a = 0; a < nIn; a++) for (let b = 0; b < nOut; b++) t[b * nIn + a] = kept[a * nOut + b];
    return { name, dtype, shape: [nOut, nIn], data: t };
  });
  const weightMap: Record<string, string> = {};
  const per = Math.ceil(entries.length / shards);
  for (let s = 0; s < shards; s++) {
    const file =
      shards === 1
        ? 'model.safetensors'
        : `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
    const part = entries.slice(s * per, (s + 1) * per);
    for (const e of part) weightMap[e.name] = file;
    writeFileSync(join(dir, file), safetensors(part));
  }
  if (shards > 1)
    writeFileSync(
      join(dir, 'model.safetensors.index.json'),
      JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }),
    );
  writeFileSync(join(dir, 'config.json'), JSON.stringify(transformersConfig(shape)));
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json'])
    copyFileSync(join(tokenizerFrom, f), join(dir, f));
  return stored;
}

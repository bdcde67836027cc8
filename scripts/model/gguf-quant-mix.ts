// Which ggml type each tensor of a Llama GGUF gets, as llama.cpp's llama-quantize decides it
// (src/llama-quant.cpp, no importance matrix): a pure file type puts every matrix in that type; Q4_K_M
// gives the output projection (or the tied embedding) Q6_K, attn_v and ffn_down of some layers Q6_K and
// the rest Q4_K. A row that is not a whole number of blocks falls back as llama.cpp does: Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, and F16 when even 32 does not divide it. Vectors (norms) stay F32.
import { GGML_TYPE, ggmlLayout } from '../../src/engine/formats/gguf/ggml-types.js';
import { QUANT_TYPES, type QuantType } from './ggml-quants.js';

/** What `--type` takes: one type for every matrix, or llama.cpp's Q4_K_M mix. */
export type GgufFileType = QuantType | 'Q4_K_M';
export const GGUF_FILE_TYPES: readonly GgufFileType[] = [...QUANT_TYPES, 'Q4_K_M'];

/** llama_ftype ids for general.file_type; a pure K type is llama.cpp's _S variant. */
export const LLAMA_FTYPE: Record<GgufFileType, number> = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q4_K: 14,
  Q4_K_M: 15,
  Q5_K: 16,
  Q6_K: 18,
  BF16: 32,
};

const K_FALLBACK: Partial<Record<QuantType, QuantType>> = { Q4_K: 'Q5_0', Q5_K: 'Q5_1', Q6_K: 'Q8_0' };

const fits = (type: QuantType, cols: number): boolean => cols % ggmlLayout(GGML_TYPE[type]).blockElements === 0;

/**
 * llama-quant.cpp's fallback for a row of `cols` values; legacy 32-blocks that do not fit stay `legacy`: F32 by
 * default (where llama-quantize would refuse the file), so small test models still write, or F16, as
 * convert_hf_to_gguf.py's --outtype q8_0 writes such a tensor.
 */
function withFallback(type: QuantType, cols: number, legacy: 'F32' | 'F16' = 'F32'): QuantType {
  if (fits(type, cols)) return type;
  const next = K_FALLBACK[type];
  if (next) return fits(next, cols) ? next : 'F16';
  return legacy;
}

/** llama.cpp's use_more_bits: the first and last eighth of the layers and every third one between. */
export function useMoreBits(layer: number, layers: number): boolean {
  const e = Math.floor(layers / 8);
  return layer < e || layer >= Math.floor((7 * layers) / 8) || (layer - e) % 3 === 2;
}

export interface MixContext {
  numLayers: number;
  /** True when the file has no output.weight (llama.cpp then treats token_embd as the output). */
  tiedEmbeddings: boolean;
  /** What a legacy type's tensor whose rows are not whole blocks becomes (withFallback); F32 unless said. */
  legacyFallback?: 'F32' | 'F16';
}

/** The type of tensor `name` with dims `ne` in a file of type `fileType`. */
export function tensorTypeFor(fileType: GgufFileType, name: string, ne: readonly number[], ctx: MixContext): QuantType {
  if (ne.length < 2) return 'F32';
  if (fileType === 'F32' || fileType === 'F16' || fileType === 'BF16') return fileType;
  const cols = ne[0];
  if (fileType !== 'Q4_K_M') return withFallback(fileType, cols, ctx.legacyFallback);
  const isOutput = name === 'output.weight' || (ctx.tiedEmbeddings && name === 'token_embd.weight');
  if (isOutput) return withFallback(cols % 256 ? 'Q8_0' : 'Q6_K', cols);
  const layer = Number(/^blk\.(\d+)\./.exec(name)?.[1] ?? -1);
  // attn_v counts attn_v tensors and ffn_down counts layers; with one of each per layer both are the layer.
  const moreBits = (name.includes('attn_v.weight') || name.includes('ffn_down')) && useMoreBits(layer, ctx.numLayers);
  return withFallback(moreBits ? 'Q6_K' : 'Q4_K', cols);
}

// What a hub-shaped export is made of: the dtype (the file name transformers.js gives it) and the
// quantiser's settings. docs/models.md, "The hub's ONNX exports", lists what each one contains.
import { DataType } from '../onnx-proto-writer.js';

/** The hub's onnx/ variants the generator writes (model_bnb4 is not: MatMulBnb4 is a different op). */
export type HubDtype = 'fp32' | 'fp16' | 'q4' | 'q4f16' | 'int8' | 'uint8' | 'quantized';
export const HUB_DTYPES: readonly HubDtype[] = ['fp32', 'fp16', 'q4', 'q4f16', 'int8', 'uint8', 'quantized'];

export const HUB_ONNX_FILE: Record<HubDtype, string> = {
  fp32: 'model.onnx',
  fp16: 'model_fp16.onnx',
  q4: 'model_q4.onnx',
  q4f16: 'model_q4f16.onnx',
  int8: 'model_int8.onnx',
  uint8: 'model_uint8.onnx',
  quantized: 'model_quantized.onnx',
};

export interface HubFlavour {
  dtype: HubDtype;
  /** MatMulNBits (q4, q4f16): 4 or 8 bits per weight. */
  bits: 4 | 8;
  /** MatMulNBits block size along K: 16, 32 (transformers.js' default), 64, 128. */
  blockSize: number;
  /** MatMulNBits without zero_points (transformers.js' default); false adds a zero point per block. */
  symmetric: boolean;
  /** MatMulNBits' accuracy_level attribute; absent unless set, as transformers.js writes it. */
  accuracyLevel?: number;
  /** int8 / uint8 / quantized: one scale and zero point per output column instead of per tensor. */
  perChannel: boolean;
  /** fp16 / q4f16: the KV and logits type. float16 as optimum's fp16 export; float32 as keep_io_types. */
  halfIo: boolean;
  /** Where the RoPE inverse frequencies are: a folded initializer onnx::Expand_<n>, a Constant node, or
   * computed in the graph from theta. */
  rope: 'folded' | 'constant' | 'computed';
  /** RMSNorm's 1/sqrt: Div(1, Sqrt) as torch exports rsqrt, or Reciprocal(Sqrt). */
  rsqrt: 'div' | 'reciprocal';
  /** Norm weights under their parameter names, or folded as onnx::Mul_<n>. */
  normNames: 'param' | 'folded';
  /**
   * What the export is for: `text-generation` (LlamaForCausalLM: logits), or `feature-extraction` (LlamaModel, as
   * optimum exports an embedding model: the final norm's output as `last_hidden_state`, no LM head).
   */
  task: 'text-generation' | 'feature-extraction';
}

export function hubFlavour(dtype: HubDtype, o: Partial<Omit<HubFlavour, 'dtype'>> = {}): HubFlavour {
  const f: HubFlavour = {
    dtype,
    bits: 4,
    blockSize: 32,
    symmetric: true,
    perChannel: false,
    halfIo: true,
    rope: 'folded',
    rsqrt: 'div',
    normNames: 'param',
    task: 'text-generation',
    ...o,
  };
  if (![16, 32, 64, 128].includes(f.blockSize))
    throw new Error(`block size must be 16, 32, 64 or 128, got ${f.blockSize}`);
  if (f.bits !== 4 && f.bits !== 8) throw new Error(`bits must be 4 or 8, got ${f.bits}`);
  return f;
}

export const isHalf = (d: HubDtype): boolean => d === 'fp16' || d === 'q4f16';
export const isNBits = (d: HubDtype): boolean => d === 'q4' || d === 'q4f16';
export const isDynamic = (d: HubDtype): boolean => d === 'int8' || d === 'uint8' || d === 'quantized';
/** quantize_dynamic's weight type: transformers.js' `quantized` is QInt8 for a model without Conv. */
export const weightType = (d: HubDtype): 'int8' | 'uint8' => (d === 'uint8' ? 'uint8' : 'int8');
/** The type activations are computed in. */
export const activationType = (d: HubDtype): number => (isHalf(d) ? DataType.FLOAT16 : DataType.FLOAT);

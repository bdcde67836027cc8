// A Llama-family GGUF's tensors dequantized back into our WeightMap (MatMul layout, Hugging Face names): the
// writer's mapping undone (transpose, RoPE row permutation), so the float64 reference can run the very
// values a quantised file stands for.
import { dequantizeRow } from '../../scripts/model/ggml-quants.js';
import { transpose } from '../../scripts/model/gguf-writer.js';
import type { WeightMap } from '../../scripts/model/weights.js';
import type { GgufHeader } from '../../src/engine/formats/gguf/gguf-header.js';

/** Inverse of convert_hf_to_gguf.py's permute(): per head, row j * headDim/2 + i takes row 2i + j. */
function unpermute(w: Float32Array, nHead: number, headDim: number, cols: number): Float32Array {
  const out = new Float32Array(w.length);
  const half = headDim / 2;
  for (let h = 0; h < nHead; h++)
    for (let i = 0; i < half; i++)
      for (let j = 0; j < 2; j++) {
        const src = (h * headDim + 2 * i + j) * cols;
        out.set(w.subarray(src, src + cols), (h * headDim + j * half + i) * cols);
      }
  return out;
}

export function ggufWeights(
  file: Uint8Array,
  header: GgufHeader,
  heads: { numHeads: number; numKvHeads: number; headDim: number },
  /** Filled with the names of the matrices the file holds block-quantised (not F32, F16 or BF16). */
  quantised?: Set<string>,
): WeightMap {
  const out: WeightMap = new Map();
  // Only llama's files are permuted for interleaved RoPE; Qwen's are in Hugging Face's order (NEOX RoPE).
  const arch = header.metadata.get('general.architecture');
  const permuted = arch?.type === 'string' && arch.value === 'llama';
  // Gemma's files hold each norm's scale; Hugging Face's names hold it less one (the converter's norm_shift).
  const gemma = arch?.type === 'string' && arch.value === 'gemma3';
  const vector = (name: string, data: Float32Array) =>
    out.set(name, { dims: [data.length], data: gemma && name.endsWith('norm.weight') ? data.map((w) => w - 1) : data });
  for (const t of header.tensors) {
    const at = header.dataStart + t.offset;
    const n = t.ne.reduce((a, b) => a * b, 1);
    const data = dequantizeRow(t.type, file.subarray(at, at + t.byteSize!), n);
    const layer = /^blk\.(\d+)\.(\w+)\.(weight|bias)$/.exec(t.name);
    const blockType = t.type !== 0 && t.type !== 1 && t.type !== 30; // F32, F16, BF16
    if (blockType && t.name === 'token_embd.weight') quantised?.add('model.embed_tokens.weight');
    const matrix = (name: string, ropeHeads?: number) => {
      if (blockType) quantised?.add(name);
      const [cols, rows] = t.ne;
      const rowsHf = ropeHeads === undefined || !permuted ? data : unpermute(data, ropeHeads, heads.headDim, cols);
      out.set(name, { dims: [cols, rows], data: transpose(rowsHf, rows, cols) });
    };
    if (t.name === 'token_embd.weight') out.set('model.embed_tokens.weight', { dims: [t.ne[1], t.ne[0]], data });
    else if (t.name === 'output_norm.weight') vector('model.norm.weight', data);
    else if (t.name === 'output.weight') matrix('lm_head.weight');
    else if (layer) {
      const p = `model.layers.${layer[1]}`;
      const names: Record<string, string> = {
        attn_norm: 'input_layernorm',
        ffn_norm: gemma ? 'pre_feedforward_layernorm' : 'post_attention_layernorm',
        post_attention_norm: 'post_attention_layernorm',
        post_ffw_norm: 'post_feedforward_layernorm',
        attn_q: 'self_attn.q_proj',
        attn_k: 'self_attn.k_proj',
        attn_v: 'self_attn.v_proj',
        attn_output: 'self_attn.o_proj',
        ffn_gate: 'mlp.gate_proj',
        ffn_up: 'mlp.up_proj',
        ffn_down: 'mlp.down_proj',
        attn_q_norm: 'self_attn.q_norm',
        attn_k_norm: 'self_attn.k_norm',
      };
      const name = `${p}.${names[layer[2]]}.${layer[3]}`;
      if (t.ne.length === 1) vector(name, data);
      else if (layer[2] === 'attn_q') matrix(name, heads.numHeads);
      else if (layer[2] === 'attn_k') matrix(name, heads.numKvHeads);
      else matrix(name);
    } else throw new Error(`unexpected tensor ${t.name}`);
  }
  return out;
}

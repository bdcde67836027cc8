// Reads a llama2.c (run.c version 0) checkpoint straight into the reference forward pass, with run.c's
// own conventions (interleaved RoPE, weights as stored). Written apart from scripts/import on purpose:
// the importer converts to the Hugging Face layout (permuted q/k rows, rotate-half RoPE), and the two
// must agree only if that conversion is right.
import { readFile } from 'node:fs/promises';
import { LlamaReference, type LlamaConfig } from './llama-reference';
import type { Tensor } from './onnx-weights';

export async function loadLlama2cReference(path: string): Promise<LlamaReference> {
  const file = await readFile(path);
  const bytes = new Uint8Array(file.buffer, file.byteOffset, file.byteLength);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const [dim, hidden, layers, heads, kvHeads, signedVocab, seqLen] = [0, 1, 2, 3, 4, 5, 6].map((i) =>
    view.getInt32(i * 4, true),
  );
  const vocab = Math.abs(signedVocab);
  const headSize = dim / heads;
  const kvDim = kvHeads * headSize;
  let offset = 28;
  const floats = (n: number): Float32Array => {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = view.getFloat32(offset + 4 * i, true);
    offset += 4 * n;
    return out;
  };
  // run.c's matmul is W (d, n) @ x (n): stored (out, in). The reference wants (in, out).
  const outIn = (w: Float32Array, rows: number, cols: number): Float32Array => {
    const t = new Float32Array(w.length);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = w[r * cols + c];
    return t;
  };
  const weights = new Map<string, Tensor>();
  const embed = floats(vocab * dim);
  weights.set('model.embed_tokens.weight', { dims: [vocab, dim], data: embed });
  const perLayer = (n: number) => Array.from({ length: layers }, () => floats(n));
  const attNorm = perLayer(dim);
  const wq = perLayer(dim * dim);
  const wk = perLayer(kvDim * dim);
  const wv = perLayer(kvDim * dim);
  const wo = perLayer(dim * dim);
  const ffnNorm = perLayer(dim);
  const w1 = perLayer(hidden * dim);
  const w2 = perLayer(dim * hidden);
  const w3 = perLayer(hidden * dim);
  const finalNorm = floats(dim);
  offset += 4 * seqLen * headSize; // freq_cis_real, freq_cis_imag
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}.`;
    weights.set(`${p}input_layernorm.weight`, { dims: [dim], data: attNorm[l] });
    weights.set(`${p}self_attn.q_proj.weight`, { dims: [dim, dim], data: outIn(wq[l], dim, dim) });
    weights.set(`${p}self_attn.k_proj.weight`, { dims: [dim, kvDim], data: outIn(wk[l], kvDim, dim) });
    weights.set(`${p}self_attn.v_proj.weight`, { dims: [dim, kvDim], data: outIn(wv[l], kvDim, dim) });
    weights.set(`${p}self_attn.o_proj.weight`, { dims: [dim, dim], data: outIn(wo[l], dim, dim) });
    weights.set(`${p}post_attention_layernorm.weight`, { dims: [dim], data: ffnNorm[l] });
    weights.set(`${p}mlp.gate_proj.weight`, { dims: [dim, hidden], data: outIn(w1[l], hidden, dim) });
    weights.set(`${p}mlp.up_proj.weight`, { dims: [dim, hidden], data: outIn(w3[l], hidden, dim) });
    weights.set(`${p}mlp.down_proj.weight`, { dims: [hidden, dim], data: outIn(w2[l], dim, hidden) });
  }
  weights.set('model.norm.weight', { dims: [dim], data: finalNorm });
  const shared = signedVocab > 0;
  if (!shared) weights.set('lm_head.weight', { dims: [dim, vocab], data: outIn(floats(vocab * dim), vocab, dim) });
  if (offset !== bytes.byteLength)
    throw new Error(`llama2.c reference loader: ${bytes.byteLength - offset} bytes unread`);
  const config: LlamaConfig = {
    hidden_size: dim,
    intermediate_size: hidden,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    vocab_size: vocab,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: shared,
    rope_interleaved: true,
  };
  return new LlamaReference(config, weights);
}

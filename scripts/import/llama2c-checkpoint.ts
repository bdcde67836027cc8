// Reader for llama2.c checkpoints (Karpathy's `run.c` "legacy" format, as written by export.py
// --version 0 and shipped for stories15M / 42M / 110M), into our weight names and layouts.
//
// File layout (little-endian):
//   header: 7 × int32  dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//           vocab_size < 0 means the classifier is NOT shared with the token embedding
//   then float32 tensors, in this order (shapes as run.c reads them; matrices are (out, in)):
//     token_embedding_table (vocab, dim)
//     rms_att_weight (layer, dim)
//     wq (layer, n_heads*head_size, dim)   wk, wv (layer, n_kv_heads*head_size, dim)
//     wo (layer, dim, n_heads*head_size)
//     rms_ffn_weight (layer, dim)
//     w1 (layer, hidden_dim, dim)  w2 (layer, dim, hidden_dim)  w3 (layer, hidden_dim, dim)
//     rms_final_weight (dim)
//     freq_cis_real, freq_cis_imag (seq_len, head_size/2) each: unused (RoPE is computed)
//     wcls (vocab, dim)                    only when not shared
//
// Conversions to the Hugging Face Llama layout our graph builder takes:
//   - matrices are transposed to MatMul's [in, out];
//   - w1 = gate_proj, w3 = up_proj, w2 = down_proj;
//   - run.c rotates interleaved pairs (x[2j], x[2j+1]) while HF rotates halves (x[j], x[j+hd/2]), so
//     the output rows of wq and wk are permuted within each head (2j -> j, 2j+1 -> j+hd/2), exactly as
//     transformers' convert_llama_weights_to_hf does. q·k is unchanged by a permutation applied to both.
//   - run.c's constants: rms eps 1e-5, RoPE theta 10000, head_size = dim / n_heads.
import type { LlamaShape } from '../model/presets.js';
import { layerPrefix, type WeightMap } from '../model/weights.js';

export const LLAMA2C_HEADER_BYTES = 7 * 4;

export interface Llama2cHeader {
  dim: number;
  hiddenDim: number;
  nLayers: number;
  nHeads: number;
  nKvHeads: number;
  vocabSize: number;
  seqLen: number;
  sharedClassifier: boolean;
}

export interface Llama2cCheckpoint {
  header: Llama2cHeader;
  shape: LlamaShape;
  weights: WeightMap;
}

export function readLlama2cHeader(bytes: Uint8Array): Llama2cHeader {
  if (bytes.byteLength < LLAMA2C_HEADER_BYTES)
    throw new Error('llama2.c checkpoint: file is shorter than its 28-byte header');
  const dv = new DataView(bytes.buffer, bytes.byteOffset, LLAMA2C_HEADER_BYTES);
  const h = Array.from({ length: 7 }, (_, i) => dv.getInt32(i * 4, true));
  if (h[0] === 0x616b3432) {
    throw new Error(
      'llama2.c checkpoint: this is export.py\'s version 1/2 format ("ak42" magic); run.c reads version 0: re-export with --version 0',
    );
  }
  const [dim, hiddenDim, nLayers, nHeads, nKvHeads, vocab, seqLen] = h;
  const header = {
    dim,
    hiddenDim,
    nLayers,
    nHeads,
    nKvHeads,
    vocabSize: Math.abs(vocab),
    seqLen,
    sharedClassifier: vocab > 0,
  };
  for (const [k, v] of Object.entries(header)) {
    if (typeof v === 'number' && (!Number.isInteger(v) || v <= 0 || v > 1 << 24))
      throw new Error(`llama2.c checkpoint: header ${k} = ${v} is not a plausible size`);
  }
  if (dim % nHeads !== 0) throw new Error(`llama2.c checkpoint: dim ${dim} is not a multiple of n_heads ${nHeads}`);
  if (nHeads % nKvHeads !== 0)
    throw new Error(`llama2.c checkpoint: n_heads ${nHeads} is not a multiple of n_kv_heads ${nKvHeads}`);
  if ((dim / nHeads) % 2 !== 0) throw new Error('llama2.c checkpoint: head size must be even (RoPE rotates pairs)');
  return header;
}

/** Float count of the whole weight section, so a truncated or padded file is caught before reading. */
export function llama2cFloatCount(h: Llama2cHeader): number {
  const hs = h.dim / h.nHeads;
  const kv = h.nKvHeads * hs;
  const perLayer = 2 * h.dim + h.dim * h.dim * 2 + 2 * h.dim * kv + 3 * h.dim * h.hiddenDim;
  return (
    h.vocabSize * h.dim + h.nLayers * perLayer + h.dim + h.seqLen * hs + (h.sharedClassifier ? 0 : h.vocabSize * h.dim)
  );
}

export function shapeOf(h: Llama2cHeader): LlamaShape {
  return {
    hiddenSize: h.dim,
    intermediateSize: h.hiddenDim,
    numLayers: h.nLayers,
    numHeads: h.nHeads,
    numKvHeads: h.nKvHeads,
    headDim: h.dim / h.nHeads,
    vocabSize: h.vocabSize,
    maxPositionEmbeddings: h.seqLen,
    tieWordEmbeddings: h.sharedClassifier,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
  };
}

/** (rows, cols) row-major -> (cols, rows) row-major. */
export function transpose(src: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(src.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = src[r * cols + c];
  return out;
}

/** Reorders the output rows of a (heads*hd, in) matrix from interleaved to half-split RoPE pairs. */
export function permuteRopeRows(w: Float32Array, heads: number, headDim: number, cols: number): Float32Array {
  const out = new Float32Array(w.length);
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < half; j++) {
      const base = h * headDim;
      out.set(w.subarray((base + 2 * j) * cols, (base + 2 * j + 1) * cols), (base + j) * cols);
      out.set(w.subarray((base + 2 * j + 1) * cols, (base + 2 * j + 2) * cols), (base + half + j) * cols);
    }
  }
  return out;
}

export function readLlama2cCheckpoint(bytes: Uint8Array): Llama2cCheckpoint {
  const header = readLlama2cHeader(bytes);
  const shape = shapeOf(header);
  const floats = llama2cFloatCount(header);
  const expected = LLAMA2C_HEADER_BYTES + floats * 4;
  if (bytes.byteLength !== expected) {
    throw new Error(
      `llama2.c checkpoint: header implies ${expected} bytes, file has ${bytes.byteLength} (truncated, or not a version-0 fp32 checkpoint)`,
    );
  }
  // Copy once into an aligned buffer: the file's float section starts at byte 28, which is aligned, but
  // the caller's Uint8Array may not be.
  const all = new Float32Array(floats);
  new Uint8Array(all.buffer).set(bytes.subarray(LLAMA2C_HEADER_BYTES));
  let at = 0;
  const take = (n: number): Float32Array => {
    const view = all.subarray(at, at + n);
    at += n;
    return view;
  };

  const { dim, hiddenDim: hid, nLayers: L, nHeads, nKvHeads, vocabSize: V, seqLen } = header;
  const hs = dim / nHeads;
  const kv = nKvHeads * hs;
  const weights: WeightMap = new Map();
  const set = (name: string, dims: number[], data: Float32Array) => weights.set(name, { dims, data });

  const embed = take(V * dim); // (vocab, dim): the HF embedding layout already
  const rmsAtt = take(L * dim);
  const wq = take(L * dim * dim);
  const wk = take(L * kv * dim);
  const wv = take(L * kv * dim);
  const wo = take(L * dim * dim);
  const rmsFfn = take(L * dim);
  const w1 = take(L * hid * dim);
  const w2 = take(L * dim * hid);
  const w3 = take(L * hid * dim);
  const rmsFinal = take(dim);
  take(seqLen * hs); // freq_cis_real + freq_cis_imag: (seq_len, hs/2) each
  const wcls = header.sharedClassifier ? null : take(V * dim);

  set('model.embed_tokens.weight', [V, dim], embed.slice());
  for (let l = 0; l < L; l++) {
    const p = layerPrefix(l);
    const part = (w: Float32Array, n: number) => w.subarray(l * n, (l + 1) * n);
    set(`${p}.input_layernorm.weight`, [dim], part(rmsAtt, dim).slice());
    set(
      `${p}.self_attn.q_proj.weight`,
      [dim, dim],
      transpose(permuteRopeRows(part(wq, dim * dim), nHeads, hs, dim), dim, dim),
    );
    set(
      `${p}.self_attn.k_proj.weight`,
      [dim, kv],
      transpose(permuteRopeRows(part(wk, kv * dim), nKvHeads, hs, dim), kv, dim),
    );
    set(`${p}.self_attn.v_proj.weight`, [dim, kv], transpose(part(wv, kv * dim), kv, dim));
    set(`${p}.self_attn.o_proj.weight`, [dim, dim], transpose(part(wo, dim * dim), dim, dim));
    set(`${p}.post_attention_layernorm.weight`, [dim], part(rmsFfn, dim).slice());
    set(`${p}.mlp.gate_proj.weight`, [dim, hid], transpose(part(w1, hid * dim), hid, dim));
    set(`${p}.mlp.up_proj.weight`, [dim, hid], transpose(part(w3, hid * dim), hid, dim));
    set(`${p}.mlp.down_proj.weight`, [hid, dim], transpose(part(w2, dim * hid), dim, hid));
  }
  set('model.norm.weight', [dim], rmsFinal.slice());
  if (wcls) set('lm_head.weight', [dim, V], transpose(wcls, V, dim));
  return { header, shape, weights };
}

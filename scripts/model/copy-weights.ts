// Weights for a model that continues repeated text: layer 0 holds a hand-built "look back p − 1
// positions and copy that token" attention head, every other sublayer's output projection is zero (it
// still costs its full compute and memory traffic), so the model predicts x[t+1] = x[t+1−p]. Random
// models never copy, so prompt lookup never gets a proposal accepted on them; real models copy repeated
// text all the time (induction heads). This gives speculative decoding's benchmark a model with
// bench-135m's exact shapes and cost that behaves that way on a prompt repeating a p-token phrase.
//
// Construction (head_dim d, rotate-half RoPE with inverse frequencies θ_i):
// - embeddings e_t = [1, n_t], n_t random with |n_t|² = H − 1: every row has rms exactly 1, so after RMSNorm
//   coordinate 0 is the same constant for every token, and the query and key read only it.
// - q = a·(1, ..., 1, 0, ..., 0) and k_j = b·(cos φ_i, sin φ_i) pairs with φ_i = (p − 1)·θ_i: after RoPE,
//   q·k = a·b·Σ_i cos((Δ − (p − 1))·θ_i), largest exactly at distance Δ = p − 1 (by ≥ 0.5 · ab / √d
//   over any other distance at these sizes, so softmax puts ~all weight there).
// - v copies residual coordinates 1..kv_heads·d; o_proj adds them back, G times, at the same place, so the
//   tied output projection scores the copied token G·|copied part|² above the rest.
import type { LlamaShape } from './presets.js';
import { fillGaussian, layerPrefix, makeWeights, ropeInvFreq, type WeightMap } from './weights.js';

const QK_SCALE = 13;
const COPY_GAIN = 10;

export function makeCopyWeights(p: LlamaShape, seed: number, period: number): WeightMap {
  if (!p.tieWordEmbeddings) throw new Error('the copy construction relies on tied embeddings');
  const hd = p.headDim;
  const copied = p.numKvHeads * hd;
  if (1 + copied > p.hiddenSize) throw new Error('kv_heads × head_dim must leave room for the constant coordinate');
  const w = makeWeights(p, seed);
  const get = (name: string): Float32Array => w.get(name)!.data;
  const H = p.hiddenSize;

  const embed = get('model.embed_tokens.weight'); // (vocab, H)
  fillGaussian(embed, seed, 'copy.embed', 1);
  for (let t = 0; t < p.vocabSize; t++) {
    // Every row gets the same norm, so RMSNorm divides every token by the same rms and the query and key
    // read the same constant: a per-token rms would scale the attention scores by ±10%, more than the gap
    // between neighbouring distances.
    const row = embed.subarray(t * H, (t + 1) * H);
    row[0] = 0;
    const norm = Math.sqrt(row.reduce((sum, x) => sum + x * x, 0));
    for (let d = 1; d < H; d++) row[d] *= Math.sqrt(H - 1) / norm;
    row[0] = 1;
  }

  for (let l = 0; l < p.numLayers; l++) {
    get(`${layerPrefix(l)}.self_attn.o_proj.weight`).fill(0);
    get(`${layerPrefix(l)}.mlp.down_proj.weight`).fill(0);
  }
  const l0 = layerPrefix(0);
  get(`${l0}.input_layernorm.weight`).fill(1);
  get('model.norm.weight').fill(1);

  const q = get(`${l0}.self_attn.q_proj.weight`).fill(0); // (H, heads·d), MatMul layout [in, out]
  const k = get(`${l0}.self_attn.k_proj.weight`).fill(0); // (H, kv_heads·d)
  const v = get(`${l0}.self_attn.v_proj.weight`).fill(0); // (H, kv_heads·d)
  const o = get(`${l0}.self_attn.o_proj.weight`); // (heads·d, H), zero already
  const invFreq = ropeInvFreq(p);
  const half = hd / 2;
  for (let h = 0; h < p.numHeads; h++) for (let i = 0; i < half; i++) q[h * hd + i] = QK_SCALE;
  const group = p.numHeads / p.numKvHeads;
  for (let g = 0; g < p.numKvHeads; g++) {
    for (let i = 0; i < half; i++) {
      const phi = (period - 1) * invFreq[i];
      k[g * hd + i] = QK_SCALE * Math.cos(phi);
      k[g * hd + i + half] = QK_SCALE * Math.sin(phi);
    }
    for (let d = 0; d < hd; d++) {
      v[(1 + g * hd + d) * copied + g * hd + d] = 1;
      // The first query head of kv head g's group writes the copy back; the group's others add nothing.
      o[(g * group * hd + d) * H + 1 + g * hd + d] = COPY_GAIN;
    }
  }
  return w;
}

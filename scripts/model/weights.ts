// Seeded, deterministic, well-conditioned random Llama weights.
//
// Determinism: every tensor has its own PRNG stream seeded from (seed, tensor name), so values do
// not depend on generation order, and only integer and basic float arithmetic is used (no Math.log /
// Math.cos), so the bytes are the same on every platform.
//
// Conditioning: RMSNorm makes each sublayer's output size independent of the residual size, so the
// residual mix is set by the output-projection gains. The attention and MLP outputs are made
// several times larger than the token embedding; with tied embeddings this keeps the "predict the
// input token again" term small, so greedy decoding does not lock onto one token. Embeddings are
// scaled so logits have a std of about LOGIT_STD (peaked: top-2 gaps far above float rounding).
import type { LlamaShape } from './presets.js';

/** Logit std target: large enough that greedy decisions are never near-ties. */
const LOGIT_STD = 8;
/** Sublayer output rms relative to the embedding rms. */
const ATTN_OUT_GAIN = 4;
const MLP_OUT_GAIN = 6;
/** q/k gain > 1 makes attention sharper, so outputs depend on context. */
const QK_GAIN = 1.6;

/** splitmix32-style mixer: a good 32-bit hash of a 32-bit state. */
function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x21f0aaad);
  x = Math.imul(x ^ (x >>> 15), 0x735a2d97);
  return (x ^ (x >>> 15)) >>> 0;
}

function hashString(s: string, seed: number): number {
  let h = mix32(seed ^ 0x9e3779b9);
  for (let i = 0; i < s.length; i++) h = mix32(h ^ s.charCodeAt(i));
  return h;
}

/** Fills `out` with approximately N(0, std^2) values (Irwin-Hall of 4 uniforms: bounded at 3.46 std). */
export function fillGaussian(out: Float32Array, seed: number, name: string, std: number, mean = 0): void {
  let state = hashString(name, seed);
  const k = (std * Math.sqrt(3)) / 2 ** 32; // sum of 4 U(0,1) has variance 1/3
  for (let i = 0; i < out.length; i++) {
    let sum = 0;
    for (let j = 0; j < 4; j++) {
      state = (state + 0x9e3779b9) >>> 0;
      sum += mix32(state);
    }
    out[i] = mean + (sum - 2 * 2 ** 32) * k;
  }
}

/** fp32 weights by SPEC name; matrices are in MatMul layout [in, out]. */
export type WeightMap = Map<string, { dims: number[]; data: Float32Array }>;

export function layerPrefix(i: number): string {
  return `model.layers.${i}`;
}

/** Names and shapes in the order they are written to the ONNX file. */
export function weightSpecs(p: LlamaShape): { name: string; dims: number[] }[] {
  const H = p.hiddenSize;
  const q = p.numHeads * p.headDim;
  const kv = p.numKvHeads * p.headDim;
  const I = p.intermediateSize;
  const specs: { name: string; dims: number[] }[] = [{ name: 'model.embed_tokens.weight', dims: [p.vocabSize, H] }];
  for (let i = 0; i < p.numLayers; i++) {
    const l = layerPrefix(i);
    specs.push(
      { name: `${l}.input_layernorm.weight`, dims: [H] },
      { name: `${l}.self_attn.q_proj.weight`, dims: [H, q] },
      { name: `${l}.self_attn.k_proj.weight`, dims: [H, kv] },
      { name: `${l}.self_attn.v_proj.weight`, dims: [H, kv] },
      { name: `${l}.self_attn.o_proj.weight`, dims: [q, H] },
      ...architectureSpecs(p, l),
      { name: `${l}.post_attention_layernorm.weight`, dims: [H] },
      { name: `${l}.mlp.gate_proj.weight`, dims: [H, I] },
      { name: `${l}.mlp.up_proj.weight`, dims: [H, I] },
      { name: `${l}.mlp.down_proj.weight`, dims: [I, H] },
    );
  }
  specs.push({ name: 'model.norm.weight', dims: [H] });
  if (!p.tieWordEmbeddings) specs.push({ name: 'lm_head.weight', dims: [H, p.vocabSize] });
  return specs;
}

/** The tensors a layer of `p`'s architecture has beyond a Llama layer's (Hugging Face's names). */
function architectureSpecs(p: LlamaShape, l: string): { name: string; dims: number[] }[] {
  const q = p.numHeads * p.headDim;
  const kv = p.numKvHeads * p.headDim;
  if (p.architecture === 'qwen2')
    return [
      { name: `${l}.self_attn.q_proj.bias`, dims: [q] },
      { name: `${l}.self_attn.k_proj.bias`, dims: [kv] },
      { name: `${l}.self_attn.v_proj.bias`, dims: [kv] },
    ];
  const qkNorms = [
    { name: `${l}.self_attn.q_norm.weight`, dims: [p.headDim] },
    { name: `${l}.self_attn.k_norm.weight`, dims: [p.headDim] },
  ];
  if (p.architecture === 'qwen3') return qkNorms;
  // Gemma 3's post_attention_layernorm (above) normalises the attention's output; these, the MLP's input and output.
  if (p.architecture === 'gemma3')
    return [
      ...qkNorms,
      { name: `${l}.pre_feedforward_layernorm.weight`, dims: [p.hiddenSize] },
      { name: `${l}.post_feedforward_layernorm.weight`, dims: [p.hiddenSize] },
    ];
  return [];
}

/** std (and mean) of each tensor kind; `fanIn` is the matrix's input size. */
function initFor(name: string, p: LlamaShape, fanIn: number): { std: number; mean: number } {
  // Normalised activations have rms ~1, so a [in, out] matrix with std g/sqrt(in) outputs rms ~g.
  const embStd = LOGIT_STD / Math.sqrt(p.hiddenSize);
  const perIn = 1 / Math.sqrt(fanIn);
  // Gemma stores a norm's scale less one. Its outputs' norms set how much each sublayer adds to a residual that
  // starts at sqrt(hidden) times the embedding: at scale 16 (and 4 on the inputs) the context outweighs the
  // last token, which otherwise predicts itself for ever, as the gains above see to for Llama. q and k keep
  // scale 1: sharper attention made the model chaotic, 8-bit activations' error then 14% of the logits.
  if (p.architecture === 'gemma3' && name.endsWith('norm.weight'))
    return /post_(attention|feedforward)_layernorm/.test(name)
      ? { std: 1, mean: 15 }
      : /\.[qk]_norm/.test(name)
        ? { std: 0.1, mean: 0 }
        : { std: 0.3, mean: 3 };
  if (name.endsWith('norm.weight')) return { std: 0.1, mean: 1 };
  // Qwen2's biases are large beside its products' outputs (rms ~1.6 for q and k); these are of that order.
  if (name.endsWith('_proj.bias')) return { std: name.includes('v_proj') ? 0.2 : 1, mean: 0 };
  if (name === 'model.embed_tokens.weight') return { std: embStd, mean: 0 };
  if (name === 'lm_head.weight') return { std: LOGIT_STD * perIn, mean: 0 };
  if (name.endsWith('q_proj.weight') || name.endsWith('k_proj.weight')) return { std: QK_GAIN * perIn, mean: 0 };
  if (name.endsWith('v_proj.weight')) return { std: perIn, mean: 0 };
  if (name.endsWith('o_proj.weight')) return { std: ATTN_OUT_GAIN * embStd * perIn, mean: 0 };
  // silu(gate)*up has rms ~0.5 for unit-rms inputs, hence the factor 2.
  if (name.endsWith('down_proj.weight')) return { std: 2 * MLP_OUT_GAIN * embStd * perIn, mean: 0 };
  return { std: perIn, mean: 0 }; // gate_proj, up_proj
}

export function makeWeights(p: LlamaShape, seed: number): WeightMap {
  const out: WeightMap = new Map();
  for (const s of weightSpecs(p)) {
    const data = new Float32Array(s.dims.reduce((a, b) => a * b, 1));
    const { std, mean } = initFor(s.name, p, s.dims[0]);
    fillGaussian(data, seed, s.name, std, mean);
    out.set(s.name, { dims: s.dims, data });
  }
  return out;
}

/** RoPE inverse frequencies: theta^(-2j/head_dim), j < head_dim/2. */
export function ropeInvFreq(p: LlamaShape): Float32Array {
  const half = p.headDim / 2;
  const out = new Float32Array(half);
  for (let j = 0; j < half; j++) out[j] = 1 / p.ropeTheta ** ((2 * j) / p.headDim);
  return out;
}

// Reference Llama forward pass (HF LlamaForCausalLM math, and Qwen2ForCausalLM's, Qwen3ForCausalLM's and
// Gemma3ForCausalLM's by config.json model_type), the oracle the engine is checked against. Deliberately naive, one token at a time, every accumulation in Float64, in the
// spirit of llama2.c run.c. It shares no code with the engine or the ONNX graph builder.
import type { Tensor } from './onnx-weights';

/** The config.json keys the math needs (extra keys are ignored). */
export interface LlamaConfig {
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim?: number;
  vocab_size: number;
  rms_norm_eps: number;
  rope_theta: number;
  tie_word_embeddings: boolean;
  /**
   * `qwen2`: q/k/v projections with biases; `qwen3`: RMSNorm over each head of q and k before RoPE;
   * `gemma3_text`: Gemma 3 (the keys below, norms scaled by 1 + w, GeGLU, embeddings times sqrt(hidden)).
   */
  model_type?: string;
  /** Gemma 3: per layer, `sliding_attention` (the last sliding_window positions, RoPE base rope_local_base_freq) or `full_attention`. */
  layer_types?: string[];
  sliding_window?: number;
  rope_local_base_freq?: number;
  /** Gemma: q . k is scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2. */
  query_pre_attn_scalar?: number;
  /** llama2.c run.c's RoPE: rotates adjacent pairs (x[2j], x[2j+1]) instead of HF's halves (x[j], x[j+hd/2]). */
  rope_interleaved?: boolean;
  [key: string]: unknown;
}

interface LayerWeights {
  attnNorm: Float32Array; // (hidden)
  wq: Float32Array; // (hidden, heads*head_dim)
  wk: Float32Array; // (hidden, kv_heads*head_dim)
  wv: Float32Array; // (hidden, kv_heads*head_dim)
  wo: Float32Array; // (heads*head_dim, hidden)
  mlpNorm: Float32Array; // (hidden)
  wGate: Float32Array; // (hidden, intermediate)
  wUp: Float32Array; // (hidden, intermediate)
  wDown: Float32Array; // (intermediate, hidden)
  /** Qwen2: added to q, k and v. */
  bq?: Float32Array; // (heads*head_dim)
  bk?: Float32Array; // (kv_heads*head_dim)
  bv?: Float32Array; // (kv_heads*head_dim)
  /** Qwen3, Gemma 3: per-head RMSNorm weights of q and k. */
  qNorm?: Float32Array; // (head_dim)
  kNorm?: Float32Array; // (head_dim)
  /** Gemma 3: norms of the attention's and the MLP's outputs (mlpNorm is then its pre_feedforward_layernorm). */
  postAttnNorm?: Float32Array; // (hidden)
  postMlpNorm?: Float32Array; // (hidden)
}

// ----------------------------------------------------------------------------------------------
// Building blocks. Weights stay Float32 (exactly representable in Float64); all arithmetic is Float64.

/** out (out) = x (in) @ w (in, out): ONNX MatMul layout, row i of w belongs to input i. */
function matmul(x: Float64Array, w: Float32Array, nIn: number, nOut: number): Float64Array {
  const out = new Float64Array(nOut);
  for (let i = 0; i < nIn; i++) {
    const xi = x[i];
    const row = i * nOut;
    for (let j = 0; j < nOut; j++) out[j] += xi * w[row + j];
  }
  return out;
}

/** y (n) = x / sqrt(mean(x^2) + eps) * (offset + w): Gemma's norms store the scale less one (offset 1). */
function rmsnorm(x: Float64Array, w: Float32Array, eps: number, offset = 0): Float64Array {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i] * x[i];
  const scale = 1 / Math.sqrt(ss / x.length + eps);
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = x[i] * scale * (offset + w[i]);
  return y;
}

/** PyTorch's gelu(approximate="tanh"). */
function geluTanh(v: number): number {
  return 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)));
}

/** In place over x[off .. off+headDim): x' = x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x2, x1). */
function ropeHead(x: Float64Array, off: number, headDim: number, pos: number, theta: number): void {
  const half = headDim / 2;
  for (let j = 0; j < half; j++) {
    const invFreq = theta ** ((-2 * j) / headDim);
    const angle = pos * invFreq; // cos/sin = cat(angle, angle): element j and j+half share it
    const c = Math.cos(angle);
    const s = Math.sin(angle);
    const x1 = x[off + j];
    const x2 = x[off + j + half];
    x[off + j] = x1 * c - x2 * s;
    x[off + j + half] = x2 * c + x1 * s;
  }
}

/** run.c's RoPE over x[off .. off+headDim): pair (2j, 2j+1) rotated by pos * theta^(-2j/headDim). */
function ropeHeadInterleaved(x: Float64Array, off: number, headDim: number, pos: number, theta: number): void {
  for (let i = 0; i < headDim; i += 2) {
    const angle = pos * theta ** (-i / headDim);
    const c = Math.cos(angle);
    const s = Math.sin(angle);
    const v0 = x[off + i];
    const v1 = x[off + i + 1];
    x[off + i] = v0 * c - v1 * s;
    x[off + i + 1] = v0 * s + v1 * c;
  }
}

function silu(v: number): number {
  return v / (1 + Math.exp(-v));
}

function argmax(v: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  return best;
}

// ----------------------------------------------------------------------------------------------

/** Halves to even. */
const roundEven = (r: number): number => (Math.abs(r - Math.trunc(r)) === 0.5 ? 2 * Math.round(r / 2) : Math.round(r));

/** max |x| / 127 over x[off .. off + n): the scale an 8-bit row of these values has. */
function int8Scale(x: Float64Array, off: number, n: number): number {
  let amax = 0;
  for (let i = off; i < off + n; i++) amax = Math.max(amax, Math.abs(x[i]));
  return amax / 127;
}

/** x[off .. off + n) rounded to 8 bits with one scale, in place (the 8-bit KV cache's rows). */
function int8Row(x: Float64Array, off: number, n: number): void {
  const s = int8Scale(x, off, n);
  if (s === 0) return;
  for (let i = off; i < off + n; i++) x[i] = roundEven(x[i] / s) * s;
}

/**
 * The 8-bit cache's value weights as its integer attention takes them: each p[t] * s[t] (s: the value row's
 * scale) rounded to 16 bits against the largest in its chunk of positions [V c, V (c + 1)), V = 128 up to
 * head_dim 128, else 64; then divided by s[t] again. p[first .. T) in place.
 */
function roundValueWeights(p: Float64Array, s: number[], first: number, T: number, headDim: number): void {
  const V = headDim <= 128 ? 128 : 64;
  for (let c = Math.floor(first / V) * V; c < T; c += V) {
    const from = Math.max(c, first);
    const to = Math.min(c + V, T);
    let top = 0;
    for (let t = from; t < to; t++) top = Math.max(top, p[t] * s[t]);
    for (let t = from; t < to; t++) {
      if (s[t] === 0) continue; // a zero row: its values are 0 whatever its weight
      p[t] = (roundEven((p[t] * s[t] * 32767) / top) * top) / 32767 / s[t];
    }
  }
}

export class LlamaReference {
  readonly hidden: number;
  readonly inter: number;
  readonly nLayers: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly vocab: number;
  readonly eps: number;
  readonly theta: number;
  readonly tied: boolean;
  private readonly rope: typeof ropeHead;
  /** Gemma 3's differences (undefined for the others). */
  private readonly gemma?: { window: number; sliding: boolean[]; localTheta: number; scale: number };

  private readonly embed: Float32Array; // (vocab, hidden)
  private readonly layers: LayerWeights[];
  private readonly finalNorm: Float32Array; // (hidden)
  private readonly lmHead: Float32Array | null; // (hidden, vocab), null when tied

  // KV cache: keys[layer][pos] is (kv_heads*head_dim), RoPE already applied; values likewise.
  private keys: Float64Array[][];
  private values: Float64Array[][];

  /** Logits (vocab) of the last token given to forward(). */
  logits: Float64Array = new Float64Array(0);
  /** The final-normed hidden state (hidden) of each position run since the last reset, by position: what embeddings pool. */
  hiddenStates: Float64Array[] = [];

  /**
   * Keys and values cached in 8 bits (KV_DTYPE int8): each (position, KV head) row of head_dim values as
   * round(x / s) * s with s = max |x| / 127, rounding halves to even; and attended as the kernels' integer
   * attention does: each query head's row rounded the same way, the value weights by roundValueWeights.
   */
  kvInt8 = false;

  /**
   * A quantised file's products as the kernels (and llama.cpp's Q8_0 dot products) take them: each product's
   * input rounded to 8 bits per block of 32, one scale a block (int8Row), the weights as the file dequantises.
   */
  activationsInt8 = false;

  /**
   * With activationsInt8, the weights whose products round their input (a file's block-quantised matrices, by
   * their arrays); unset: every product's. A file's F16 or F32 matrices (a row not a whole number of blocks) take
   * their input as it is, as the kernels' float products and llama.cpp's do.
   */
  int8Weights: ReadonlySet<Float32Array> | undefined;

  /** The arrays of `names` (Hugging Face names of the weights given to the constructor), for int8Weights. */
  arraysOf(names: Iterable<string>): Set<Float32Array> {
    return new Set([...names].map((n) => this.weights.get(n)!.data));
  }

  /** x (nIn) @ w (nIn, nOut), the input first rounded per block of 32 where activationsInt8 (and w is 8-bit). */
  private product(x: Float64Array, w: Float32Array, nIn: number, nOut: number): Float64Array {
    if (!this.activationsInt8 || (this.int8Weights && !this.int8Weights.has(w))) return matmul(x, w, nIn, nOut);
    const xq = Float64Array.from(x);
    for (let off = 0; off < nIn; off += 32) int8Row(xq, off, Math.min(32, nIn - off));
    return matmul(xq, w, nIn, nOut);
  }

  constructor(
    config: LlamaConfig,
    private readonly weights: Map<string, Tensor>,
  ) {
    this.hidden = config.hidden_size;
    this.inter = config.intermediate_size;
    this.nLayers = config.num_hidden_layers;
    this.heads = config.num_attention_heads;
    this.kvHeads = config.num_key_value_heads;
    this.headDim = config.head_dim ?? this.hidden / this.heads;
    this.vocab = config.vocab_size;
    this.eps = config.rms_norm_eps;
    this.theta = config.rope_theta;
    this.tied = config.tie_word_embeddings;
    this.rope = config.rope_interleaved ? ropeHeadInterleaved : ropeHead;
    if (config.model_type === 'gemma3_text')
      this.gemma = {
        window: config.sliding_window ?? Infinity,
        sliding: Array.from({ length: this.nLayers }, (_, l) => config.layer_types?.[l] === 'sliding_attention'),
        localTheta: config.rope_local_base_freq ?? 10000,
        scale: 1 / Math.sqrt(config.query_pre_attn_scalar ?? this.headDim),
      };
    if (this.heads % this.kvHeads !== 0) throw new Error('heads must be a multiple of kv_heads');

    const H = this.hidden;
    const Q = this.heads * this.headDim;
    const KV = this.kvHeads * this.headDim;
    const I = this.inter;
    const get = (name: string, dims: number[]): Float32Array => {
      const t = weights.get(name);
      if (!t) throw new Error(`missing weight ${name}`);
      if (t.dims.join(',') !== dims.join(',')) {
        throw new Error(`${name}: dims [${t.dims}] expected [${dims}]`);
      }
      return t.data;
    };

    this.embed = get('model.embed_tokens.weight', [this.vocab, H]);
    this.layers = [];
    const qwen2 = config.model_type === 'qwen2';
    const gemma = config.model_type === 'gemma3_text';
    const qwen3 = config.model_type === 'qwen3' || gemma;
    for (let l = 0; l < this.nLayers; l++) {
      const p = `model.layers.${l}.`;
      this.layers.push({
        ...(qwen2 && {
          bq: get(`${p}self_attn.q_proj.bias`, [Q]),
          bk: get(`${p}self_attn.k_proj.bias`, [KV]),
          bv: get(`${p}self_attn.v_proj.bias`, [KV]),
        }),
        ...(qwen3 && {
          qNorm: get(`${p}self_attn.q_norm.weight`, [this.headDim]),
          kNorm: get(`${p}self_attn.k_norm.weight`, [this.headDim]),
        }),
        attnNorm: get(`${p}input_layernorm.weight`, [H]),
        wq: get(`${p}self_attn.q_proj.weight`, [H, Q]),
        wk: get(`${p}self_attn.k_proj.weight`, [H, KV]),
        wv: get(`${p}self_attn.v_proj.weight`, [H, KV]),
        wo: get(`${p}self_attn.o_proj.weight`, [Q, H]),
        ...(gemma && {
          postAttnNorm: get(`${p}post_attention_layernorm.weight`, [H]),
          postMlpNorm: get(`${p}post_feedforward_layernorm.weight`, [H]),
        }),
        mlpNorm: get(`${p}${gemma ? 'pre_feedforward' : 'post_attention'}_layernorm.weight`, [H]),
        wGate: get(`${p}mlp.gate_proj.weight`, [H, I]),
        wUp: get(`${p}mlp.up_proj.weight`, [H, I]),
        wDown: get(`${p}mlp.down_proj.weight`, [I, H]),
      });
    }
    this.finalNorm = get('model.norm.weight', [H]);
    this.lmHead = this.tied ? null : get('lm_head.weight', [H, this.vocab]);
    this.keys = this.layers.map(() => []);
    this.values = this.layers.map(() => []);
  }

  /** Number of positions held in the KV cache. */
  get length(): number {
    return this.keys.length ? this.keys[0].length : 0;
  }

  reset(): void {
    this.keys = this.layers.map(() => []);
    this.values = this.layers.map(() => []);
    this.logits = new Float64Array(0);
    this.hiddenStates = [];
  }

  /**
   * Appends tokenIds at positions startPos.. (positions >= startPos already cached are dropped first,
   * so a rewind is allowed) and returns the logits (vocab) of every given token.
   * Tokens are run one by one: causal attention over the cache is then exactly "keys j <= pos".
   */
  forward(tokenIds: number[], startPos: number): Float64Array[] {
    if (startPos > this.length) throw new Error(`startPos ${startPos} past cache length ${this.length}`);
    for (let l = 0; l < this.nLayers; l++) {
      this.keys[l].length = startPos;
      this.values[l].length = startPos;
    }
    const out: Float64Array[] = [];
    for (const [i, tok] of tokenIds.entries()) out.push(this.step(tok, startPos + i));
    if (out.length) this.logits = out[out.length - 1];
    return out;
  }

  /** Greedy decode: prefill prompt from position 0, then `steps` argmax tokens (returned, prompt excluded). */
  greedy(prompt: number[], steps: number): number[] {
    this.reset();
    const generated: number[] = [];
    let logits = this.forward(prompt, 0);
    for (let s = 0; s < steps; s++) {
      const next = argmax(logits[logits.length - 1]);
      generated.push(next);
      if (s + 1 < steps) logits = this.forward([next], prompt.length + s);
    }
    return generated;
  }

  /** One token at position pos (cache must hold exactly pos positions). Returns logits (vocab). */
  private step(token: number, pos: number): Float64Array {
    const { hidden: H, headDim: D, heads, kvHeads, inter: I } = this;
    if (!Number.isInteger(token) || token < 0 || token >= this.vocab) throw new Error(`bad token ${token}`);

    // x (hidden) = embed_tokens[token]
    const x = new Float64Array(H);
    // Gemma: times sqrt(hidden) as a float32 tensor (HF's normalizer, in the model's dtype).
    const embScale = this.gemma ? Math.fround(Math.sqrt(H)) : 1;
    for (let i = 0; i < H; i++) x[i] = this.embed[token * H + i] * embScale;
    const off = this.gemma ? 1 : 0; // Gemma's norms: x * (1 + w)

    const group = heads / kvHeads; // query heads per kv head
    for (let l = 0; l < this.nLayers; l++) {
      const w = this.layers[l];

      // --- attention ---
      const xn = rmsnorm(x, w.attnNorm, this.eps, off); // (hidden)
      const q = this.product(xn, w.wq, H, heads * D); // (heads*head_dim)
      const k = this.product(xn, w.wk, H, kvHeads * D); // (kv_heads*head_dim)
      const v = this.product(xn, w.wv, H, kvHeads * D); // (kv_heads*head_dim)
      if (w.bq && w.bk && w.bv) {
        for (let i = 0; i < heads * D; i++) q[i] += w.bq[i];
        for (let i = 0; i < kvHeads * D; i++) {
          k[i] += w.bk[i];
          v[i] += w.bv[i];
        }
      }
      if (w.qNorm && w.kNorm) {
        for (let h = 0; h < heads; h++) q.set(rmsnorm(q.subarray(h * D, (h + 1) * D), w.qNorm, this.eps, off), h * D);
        for (let h = 0; h < kvHeads; h++) k.set(rmsnorm(k.subarray(h * D, (h + 1) * D), w.kNorm, this.eps, off), h * D);
      }
      const sliding = this.gemma?.sliding[l] === true;
      const theta = sliding ? this.gemma!.localTheta : this.theta;
      for (let h = 0; h < heads; h++) this.rope(q, h * D, D, pos, theta);
      for (let h = 0; h < kvHeads; h++) this.rope(k, h * D, D, pos, theta);
      if (this.kvInt8) for (let h = 0; h < kvHeads; h++) for (const row of [k, v]) int8Row(row, h * D, D);
      this.keys[l].push(k);
      this.values[l].push(v);
      const T = pos + 1; // visible keys: 0..pos (a sliding layer's: the last `window` of them)
      const first = sliding ? Math.max(0, T - this.gemma!.window) : 0;
      const attnScale = this.gemma ? this.gemma.scale : 1 / Math.sqrt(D);

      if (this.kvInt8) for (let h = 0; h < heads; h++) int8Row(q, h * D, D);
      const att = new Float64Array(heads * D); // (heads*head_dim) concatenated head outputs
      const scores = new Float64Array(T); // (T)
      for (let h = 0; h < heads; h++) {
        const kvh = Math.floor(h / group);
        let max = -Infinity;
        for (let t = first; t < T; t++) {
          const kt = this.keys[l][t];
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[h * D + d] * kt[kvh * D + d];
          scores[t] = dot * attnScale;
          if (scores[t] > max) max = scores[t];
        }
        let sum = 0;
        for (let t = first; t < T; t++) {
          scores[t] = Math.exp(scores[t] - max);
          sum += scores[t];
        }
        if (this.kvInt8) {
          const valueScales = this.values[l].map((v) => int8Scale(v, kvh * D, D));
          roundValueWeights(scores, valueScales, first, T, D);
        }
        for (let t = first; t < T; t++) {
          const p = scores[t] / sum;
          const vt = this.values[l][t];
          for (let d = 0; d < D; d++) att[h * D + d] += p * vt[kvh * D + d];
        }
      }
      let o = this.product(att, w.wo, heads * D, H); // (hidden)
      if (w.postAttnNorm) o = rmsnorm(o, w.postAttnNorm, this.eps, off);
      for (let i = 0; i < H; i++) x[i] += o[i];

      // --- MLP: down(silu(gate(x)) * up(x)), Gemma's with gelu_tanh ---
      const xm = rmsnorm(x, w.mlpNorm, this.eps, off); // (hidden)
      const gate = this.product(xm, w.wGate, H, I); // (intermediate)
      const up = this.product(xm, w.wUp, H, I); // (intermediate)
      const act = this.gemma ? geluTanh : silu;
      for (let i = 0; i < I; i++) gate[i] = act(gate[i]) * up[i];
      let down = this.product(gate, w.wDown, I, H); // (hidden)
      if (w.postMlpNorm) down = rmsnorm(down, w.postMlpNorm, this.eps, off);
      for (let i = 0; i < H; i++) x[i] += down[i];
    }

    const hn = rmsnorm(x, this.finalNorm, this.eps, off); // (hidden)
    this.hiddenStates[pos] = hn;
    if (this.lmHead) return this.product(hn, this.lmHead, H, this.vocab); // (vocab)
    // Tied: logits[v] = h · embed_tokens[v]
    const logits = new Float64Array(this.vocab); // (vocab)
    const rounded = this.activationsInt8 && (!this.int8Weights || this.int8Weights.has(this.embed));
    const h = rounded ? Float64Array.from(hn) : hn;
    if (rounded) for (let off = 0; off < H; off += 32) int8Row(h, off, Math.min(32, H - off));
    for (let t = 0; t < this.vocab; t++) {
      let dot = 0;
      for (let i = 0; i < H; i++) dot += h[i] * this.embed[t * H + i];
      logits[t] = dot;
    }
    return logits;
  }
}

export { argmax };

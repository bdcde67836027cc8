import { WEIGHT_WGSL } from './wgsl-weights.js';

/** Threads of the row-wise kernels' workgroups. */
export const OPS_THREADS = 64;

/**
 * A token's entry in the pass's token table (4 u32 each): its id, its position, where its row's block table
 * starts in the pass's tables, and a spare word.
 */
export const TOKEN_WORDS = 4;

/**
 * RMSNorm (kernels/elementwise.c's rmsnorm: x * (1 / sqrt(mean(x^2) + eps)) * w), one workgroup per row.
 * `main` reads X (through a row map when `gather`: the LM head's wanted rows) into Y, stored or added to Y
 * (Gemma's post-norms join the residual); `inplace` normalises Y's rows (q and k's heads, Qwen3 and Gemma 3: a (token, head) grid, so
 * no dimension passes the 65535 workgroups a dispatch allows).
 */
export const RMSNORM_WGSL = /* wgsl */ `
struct Params { n: u32, mode: u32, gather: u32, _pad: u32, eps: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> X: array<f32>;
@group(0) @binding(4) var<storage, read> rowmap: array<u32>;

const T: u32 = ${OPS_THREADS}u;
var<workgroup> red: array<f32, ${OPS_THREADS}>;

fn sum_all(v: f32, tid: u32) -> f32 {
  red[tid] = v;
  workgroupBarrier();
  for (var half = T / 2u; half > 0u; half = half / 2u) {
    if (tid < half) { red[tid] = red[tid] + red[tid + half]; }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}

@compute @workgroup_size(${OPS_THREADS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let r = wid.x;
  var src = r;
  if (P.gather == 1u) { src = rowmap[r]; }
  var ss = 0.0;
  for (var i = tid; i < P.n; i += T) { let v = X[src * P.n + i]; ss = ss + v * v; }
  let scale = 1.0 / sqrt(sum_all(ss, tid) / f32(P.n) + P.eps);
  for (var i = tid; i < P.n; i += T) {
    let v = X[src * P.n + i] * scale * G[i];
    if (P.mode == 1u) { Y[r * P.n + i] = Y[r * P.n + i] + v; } else { Y[r * P.n + i] = v; }
  }
}

@compute @workgroup_size(${OPS_THREADS})
fn inplace(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let r = wid.x * nwg.y + wid.y;
  var ss = 0.0;
  for (var i = tid; i < P.n; i += T) { let v = Y[r * P.n + i]; ss = ss + v * v; }
  let scale = 1.0 / sqrt(sum_all(ss, tid) / f32(P.n) + P.eps);
  for (var i = tid; i < P.n; i += T) { Y[r * P.n + i] = Y[r * P.n + i] * scale * G[i]; }
}
`;

/**
 * Per token (one workgroup each): Hugging Face RoPE (the kernels' rope: halves of each head) on its q and k
 * rows in place, then its key and value rows into its block of the paged pool (kv_write, kv_write_f16): one
 * dispatch where the kernels make three calls. A float16 pool holds two elements per u32 word
 * (pack2x16float), each thread writing one pair.
 */
export function ropeKvWgsl(f16: boolean): string {
  const pool = f16 ? 'array<u32>' : 'array<f32>';
  return /* wgsl */ `
struct Params { heads: u32, kvHeads: u32, half: u32, blockSize: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> Q: array<f32>;
@group(0) @binding(2) var<storage, read_write> K: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read> R: array<f32>;
@group(0) @binding(5) var<storage, read_write> KP: ${pool};
@group(0) @binding(6) var<storage, read_write> VP: ${pool};
@group(0) @binding(7) var<storage, read> tok: array<u32>;
@group(0) @binding(8) var<storage, read> tables: array<u32>;

@compute @workgroup_size(${OPS_THREADS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let t = wid.x;
  let hd = 2u * P.half;
  for (var i = tid; i < (P.heads + P.kvHeads) * P.half; i += ${OPS_THREADS}u) {
    let h = i / P.half;
    let j = i % P.half;
    let c = R[t * hd + j];
    let s = R[t * hd + P.half + j];
    if (h < P.heads) {
      let at = (t * P.heads + h) * hd + j;
      let a = Q[at];
      let b = Q[at + P.half];
      Q[at] = a * c - b * s;
      Q[at + P.half] = b * c + a * s;
    } else {
      let at = (t * P.kvHeads + h - P.heads) * hd + j;
      let a = K[at];
      let b = K[at + P.half];
      K[at] = a * c - b * s;
      K[at + P.half] = b * c + a * s;
    }
  }
  // This token's rotated keys, written by other threads of this workgroup, before they are stored.
  storageBarrier();
  let pos = tok[t * ${TOKEN_WORDS}u + 1u];
  let block = tables[tok[t * ${TOKEN_WORDS}u + 2u] + pos / P.blockSize];
  let width = P.kvHeads * hd;
  let step = ${f16 ? '2u' : '1u'};
  for (var i = tid * step; i < width; i += ${OPS_THREADS}u * step) {
    let h = i / hd;
    let d = i % hd;
    let at = ((block * P.kvHeads + h) * P.blockSize + pos % P.blockSize) * hd + d;
    ${
      f16
        ? `KP[at / 2u] = pack2x16float(vec2f(K[t * width + i], K[t * width + i + 1u]));
    VP[at / 2u] = pack2x16float(vec2f(V[t * width + i], V[t * width + i + 1u]));`
        : `KP[at] = K[t * width + i];
    VP[at] = V[t * width + i];`
    }
  }
}
`;
}

/** Each token's embedding row (dequantised like dequantize_column) times Gemma's scale, one workgroup per token. */
export const EMBED_WGSL = /* wgsl */ `
${WEIGHT_WGSL}
struct Params { mat: Mat, scale: f32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> W: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> tok: array<u32>;

@compute @workgroup_size(${OPS_THREADS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let t = wid.x;
  let id = tok[t * ${TOKEN_WORDS}u];
  let H = P.mat.K;
  for (var k = tid; k < H; k += ${OPS_THREADS}u) { Y[t * H + k] = wat(P.mat, id, k) * P.scale; }
}
`;

/** Threads of a LoRA kernel's workgroup. */
export const LORA_THREADS = 64;

/** Words of a LoRA dispatch's parameters (`LoraParams`). */
export const LORA_PARAM_WORDS = 11;

/**
 * The LoRA update of one projection for one adapter's tokens (the GPU twin of lora-deltas.ts), in two kernels
 * over every token of the pass, each skipping tokens of other adapters and of the base (`LI`: the pass's
 * token → slot map and each slot's adapter id, wgsl-runner.ts):
 *   lora_a: U (t, rank) = scale · x_t Aᵀ, one workgroup per (rank index, token), its threads striding K and
 *           summed by a fixed tree;
 *   lora_b: D (t, ldD) at colOff = U_t Bᵀ, a thread per output column, rank summed in order.
 * The projection's product then adds D to the tokens the adapter changes (wgsl-matmul.ts). Every value is a
 * token's own, in a fixed order: an adapter row's logits are the same bits alone and batched.
 * AD holds the adapter's matrices as uploaded (gpu-adapters.ts): A (rank, K) at aOff, B (N, rank) at bOff.
 */
export const LORA_WGSL = /* wgsl */ `
struct LoraParams {
  id: u32, rank: u32, K: u32, N: u32,
  aOff: u32, bOff: u32, ldD: u32, colOff: u32,
  scale: f32, layers: u32, _a: u32,
}
struct Step { tokens: u32, logitRows: u32, loraSlots: u32, _b: u32 }

@group(0) @binding(0) var<uniform> P: LoraParams;
@group(0) @binding(1) var<storage, read> AD: array<f32>;
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read_write> U: array<f32>;
@group(0) @binding(4) var<storage, read_write> D: array<f32>;
@group(0) @binding(5) var<storage, read> LI: array<u32>;
@group(0) @binding(6) var<storage, read> S: Step;

const T: u32 = ${LORA_THREADS}u;
var<workgroup> red: array<f32, ${LORA_THREADS}>;

/** Whether token t runs with this dispatch's adapter. */
fn mine(t: u32) -> bool {
  if (t >= S.tokens) { return false; }
  let slot = LI[t];
  return slot != 0u && LI[S.tokens + (slot - 1u) * (P.layers + 1u)] == P.id;
}

@compute @workgroup_size(${LORA_THREADS})
fn lora_a(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let j = wid.x;
  let t = wid.y;
  let take = mine(t);
  var acc = 0.0;
  if (take) {
    let a = P.aOff + j * P.K;
    for (var k = tid; k < P.K; k += T) { acc = acc + X[t * P.K + k] * AD[a + k]; }
  }
  red[tid] = acc;
  workgroupBarrier();
  for (var half = T / 2u; half > 0u; half = half / 2u) {
    if (tid < half) { red[tid] = red[tid] + red[tid + half]; }
    workgroupBarrier();
  }
  if (tid == 0u && take) { U[t * P.rank + j] = red[0] * P.scale; }
}

@compute @workgroup_size(${LORA_THREADS})
fn lora_b(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let n = wid.x * T + tid;
  let t = wid.y;
  if (n >= P.N || !mine(t)) { return; }
  var acc = 0.0;
  let b = P.bOff + n * P.rank;
  for (var j = 0u; j < P.rank; j++) { acc = acc + U[t * P.rank + j] * AD[b + j]; }
  D[t * P.ldD + P.colOff + n] = acc;
}
`;

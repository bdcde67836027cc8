import { WEIGHT_WGSL } from './wgsl-weights.js';

/** Threads of a product's workgroup, and the rows of x one workgroup multiplies by its column. */
export const MATMUL_THREADS = 64;
export const MATMUL_ROWS = 4;

/** What a product does with each dot product (`Params.mode`). */
export const EPILOGUE = { store: 0, accumulate: 1, silu: 2, gelu: 3 } as const;

/** The threads' parts summed by a fixed tree through workgroup memory; the sums land in red[r * T]. */
const TREE_SUM = /* wgsl */ `
  for (var r = 0u; r < C * R; r++) { red[r * T + tid] = acc[r]; }
  workgroupBarrier();
  for (var half = T / 2u; half > 0u; half = half / 2u) {
    if (tid < half) {
      for (var r = 0u; r < C * R; r++) { red[r * T + tid] = red[r * T + tid] + red[r * T + tid + half]; }
    }
    workgroupBarrier();
  }
  if (tid != 0u) { return; }`;

/**
 * Where the adapter has subgroups: each subgroup sums its threads' parts in registers (subgroupAdd), then
 * thread 0 adds the subgroups' sums in order; two barriers fewer than the tree's six.
 */
const SUBGROUP_BUILTINS = `
  @builtin(subgroup_invocation_id) sid: u32,
  @builtin(subgroup_size) sgs: u32,`;

const SUBGROUP_SUM = /* wgsl */ `
  let groups = (T + sgs - 1u) / sgs;
  for (var r = 0u; r < C * R; r++) {
    let part = subgroupAdd(acc[r]);
    if (sid == 0u) { red[r * T + tid / sgs] = part; }
  }
  workgroupBarrier();
  if (tid != 0u) { return; }
  for (var r = 0u; r < C * R; r++) {
    var total = red[r * T];
    for (var j = 1u; j < groups; j++) { total = total + red[r * T + j]; }
    red[r * T] = total;
  }`;

/**
 * Y (M, N) = X (M, K) @ W, W in its uploaded form (wgsl-weights.ts). One workgroup per output column and
 * MATMUL_ROWS rows: its threads stride along K (dense) or along K's blocks of 32 (quantised), each
 * decoding a weight once for every row, then a fixed tree (or subgroups, where the adapter has them) sums
 * the threads' parts. A row's dot product is so the same float operations whatever M or the row's place
 * among the rows: batch-invariant bit for bit.
 * The epilogue fuses what follows a product in the kernels (kernel-runner.ts), in their float order:
 * + bias (Qwen2), the residual's += (o and down), act(gate) * up (SwiGLU and GeGLU): from the gate's
 * stored product, or, where W is [gate; up] stacked (`stacked`), from the workgroup's own two columns.
 * LoRA (wgsl-lora.ts): where the pass has adapter rows (`S.loraSlots`), a token whose adapter changes this
 * projection (`P.lora`, its module's index + 1, in `P.layer`) has its delta D added to the dot product before the
 * epilogue, as the merged weights would have it; a base token's dot product is untouched.
 */
export function matmulWgsl(subgroups: boolean): string {
  return /* wgsl */ `${subgroups ? 'enable subgroups;' : ''}
${WEIGHT_WGSL}
struct Params {
  mat: Mat,
  mode: u32, bias: u32, rows: u32, stacked: u32,
  lora: u32, layer: u32, layers: u32,
}
struct Step { tokens: u32, logitRows: u32, loraSlots: u32, _b: u32 }

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> W: array<u32>;
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<storage, read> A: array<f32>;
@group(0) @binding(5) var<storage, read> S: Step;
@group(0) @binding(6) var<storage, read> D: array<f32>;
@group(0) @binding(7) var<storage, read> LI: array<u32>;

const T: u32 = ${MATMUL_THREADS}u;
const R: u32 = ${MATMUL_ROWS}u;
var<workgroup> red: array<f32, ${2 * MATMUL_THREADS * MATMUL_ROWS}>;

@compute @workgroup_size(${MATMUL_THREADS})
fn main(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) tid: u32,${subgroups ? SUBGROUP_BUILTINS : ''}
) {
  let M = P.mat;
  // Stacked: this workgroup's columns are n and n + N/2 (gate and up), its output N/2 wide.
  let C = 1u + P.stacked;
  let N = M.N / C;
  let n = wid.x + wid.y * nwg.x;
  if (n >= N) { return; }
  let m0 = wid.z * R;
  let rowsAll = select(S.tokens, S.logitRows, P.rows == 1u);
  let live = min(R, rowsAll - min(rowsAll, m0));
  var acc = array<f32, ${2 * MATMUL_ROWS}>();
  for (var c = 0u; c < C; c++) {
    let col = n + c * N;
    if (M.kind < 16u) {
      for (var k = tid; k < M.K; k += T) {
        let w = wdense(M, col, k);
        for (var r = 0u; r < live; r++) { acc[c * R + r] = acc[c * R + r] + w * X[(m0 + r) * M.K + k]; }
      }
    } else {
      for (var b = tid; b < M.blocks; b += T) {
        let end = min(32u, M.K - min(M.K, b * 32u));
        for (var i = 0u; i < end; i++) {
          let w = wquant(M, col, b, i);
          let k = b * 32u + i;
          for (var r = 0u; r < live; r++) { acc[c * R + r] = acc[c * R + r] + w * X[(m0 + r) * M.K + k]; }
        }
      }
    }
  }
${subgroups ? SUBGROUP_SUM : TREE_SUM}
  for (var r = 0u; r < live; r++) {
    var dot = red[r * T];
    var up = red[(R + r) * T];
    let at = (m0 + r) * N + n;
    if (P.lora != 0u && S.loraSlots != 0u) {
      let t = m0 + r;
      let slot = LI[t];
      if (slot != 0u) {
        let mask = LI[S.tokens + (slot - 1u) * (P.layers + 1u) + 1u + P.layer];
        if (((mask >> (P.lora - 1u)) & 1u) != 0u) { dot = dot + D[t * M.N + n]; }
        if (P.stacked == 1u && ((mask >> P.lora) & 1u) != 0u) { up = up + D[t * M.N + n + N]; }
      }
    }
    if (P.stacked == 1u) {
      if (P.mode == 3u) {
        let u = (dot + 0.044715 * (dot * (dot * dot))) * (-2.0 * 0.7978845608028654);
        Y[at] = (dot / (1.0 + exp(u))) * up;
      } else {
        Y[at] = (dot * (1.0 / (1.0 + exp(-dot)))) * up;
      }
      continue;
    }
    switch P.mode {
      case 1u: { Y[at] = Y[at] + dot; }
      case 2u: {
        let g = A[at];
        Y[at] = (g * (1.0 / (1.0 + exp(-g)))) * dot;
      }
      case 3u: {
        let x = A[at];
        let u = (x + 0.044715 * (x * (x * x))) * (-2.0 * 0.7978845608028654);
        Y[at] = (x / (1.0 + exp(u))) * dot;
      }
      default: {
        if (P.bias == 1u) { Y[at] = dot + A[n]; } else { Y[at] = dot; }
      }
    }
  }
}
`;
}

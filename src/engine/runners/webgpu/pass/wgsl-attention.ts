import { TOKEN_WORDS } from './wgsl-ops.js';

/** Keys a workgroup scores at once (one per thread), and the largest head_dim (kernels' MAX_HEAD_DIM). */
export const ATTENTION_THREADS = 64;
export const MAX_HEAD_DIM = 256;

/**
 * Attention straight over the paged pool (kernels/attention.c's contract): token t at position p sees keys
 * max(0, p - window + 1) .. p of its own sequence, read in place through its block table; GQA maps head h
 * to KV head h / (heads / kv_heads). One workgroup per (head, token) walks its keys ATTENTION_THREADS at a
 * time with a running maximum (online softmax): each thread scores one key, then every thread folds the
 * chunk's weights into the sum and into its own output dimensions in key order. A float16 pool is read
 * two elements per u32 word (unpack2x16float). What a (token, head)
 * computes depends only on its query and its keys, never on the tokens beside it in the pass.
 */
export function attentionWgsl(f16: boolean): string {
  const pool = f16 ? 'array<u32>' : 'array<f32>';
  return /* wgsl */ `
struct Params { heads: u32, kvHeads: u32, headDim: u32, blockSize: u32, scale: f32, window: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> KP: ${pool};
@group(0) @binding(3) var<storage, read> VP: ${pool};
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
@group(0) @binding(5) var<storage, read> tok: array<u32>;
@group(0) @binding(6) var<storage, read> tables: array<u32>;

const T: u32 = ${ATTENTION_THREADS}u;
const DPT: u32 = ${MAX_HEAD_DIM / ATTENTION_THREADS}u;
const LOW: f32 = -3.0e38;
var<workgroup> qs: array<f32, ${MAX_HEAD_DIM}>;
var<workgroup> ps: array<f32, ${ATTENTION_THREADS}>;
var<workgroup> rowAt: array<u32, ${ATTENTION_THREADS}>;
var<workgroup> wpos: u32;
var<workgroup> wtable: u32;

fn kv(at: u32, values: bool) -> f32 {
  ${
    f16
      ? `var word = KP[at >> 1u];
  if (values) { word = VP[at >> 1u]; }
  return unpack2x16float(word)[at & 1u];`
      : `if (values) { return VP[at]; }
  return KP[at];`
  }
}

fn key_at(table: u32, p: u32, g: u32) -> u32 {
  let block = tables[table + p / P.blockSize];
  return ((block * P.kvHeads + g) * P.blockSize + p % P.blockSize) * P.headDim;
}

@compute @workgroup_size(${ATTENTION_THREADS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let h = wid.x;
  let t = wid.y;
  let hd = P.headDim;
  let g = h / (P.heads / P.kvHeads);
  if (tid == 0u) {
    wpos = tok[t * ${TOKEN_WORDS}u + 1u];
    wtable = tok[t * ${TOKEN_WORDS}u + 2u];
  }
  for (var d = tid; d < hd; d += T) { qs[d] = Q[(t * P.heads + h) * hd + d]; }
  let pos = workgroupUniformLoad(&wpos);
  let table = workgroupUniformLoad(&wtable);
  var lo = 0u;
  if (P.window > 0u && pos + 1u > P.window) { lo = pos + 1u - P.window; }
  var m = LOW;
  var l = 0.0;
  var acc = array<f32, ${MAX_HEAD_DIM / ATTENTION_THREADS}>();
  for (var c0 = lo; c0 <= pos; c0 += T) {
    let p = c0 + tid;
    var s = LOW;
    if (p <= pos) {
      let at = key_at(table, p, g);
      rowAt[tid] = at;
      var dot = 0.0;
      for (var d = 0u; d < hd; d++) { dot = dot + qs[d] * kv(at + d, false); }
      s = dot * P.scale;
    }
    ps[tid] = s;
    workgroupBarrier();
    let n = min(T, pos + 1u - c0);
    var cmax = m;
    for (var j = 0u; j < n; j++) { cmax = max(cmax, ps[j]); }
    workgroupBarrier();
    if (p <= pos) { ps[tid] = exp(s - cmax); }
    workgroupBarrier();
    let factor = exp(m - cmax);
    var sum = 0.0;
    for (var j = 0u; j < n; j++) { sum = sum + ps[j]; }
    l = l * factor + sum;
    for (var i = 0u; i < DPT; i++) {
      let d = tid + i * T;
      if (d < hd) {
        var a = acc[i] * factor;
        for (var j = 0u; j < n; j++) { a = a + ps[j] * kv(rowAt[j] + d, true); }
        acc[i] = a;
      }
    }
    m = cmax;
    workgroupBarrier();
  }
  for (var i = 0u; i < DPT; i++) {
    let d = tid + i * T;
    if (d < hd) { O[(t * P.heads + h) * hd + d] = acc[i] / l; }
  }
}
`;
}

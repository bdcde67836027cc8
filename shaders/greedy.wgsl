// Fused softmax / argmax for greedy decoding: one workgroup per row of logits gives the token id (the
// largest logit, lowest id on ties) and its log-probability, log_softmax(logits)[id] = -log(sum exp(x - max)),
// without the vocabulary leaving the device. Logits are sanitised as the CPU sampler does: NaN is
// -inf, +inf is the largest float32. A row whose every logit is -inf gives id 0 (as argmax on the CPU).
//
// logits: the model's output buffer; row r starts at row_starts[r] (e.g. the last fed token of each
//         sequence inside ORT's (batch, seq, vocab) logits), `vocab` floats long.
// out:    (rows) { id, logprob }

struct Params {
  vocab: u32,
  rows: u32,
  // -inf, from the host: WGSL constant expressions cannot hold an infinity.
  neg_inf: f32,
  _pad: u32,
}

struct Greedy {
  id: u32,
  logprob: f32,
}

const WG: u32 = 256u;
const FLOAT32_MAX: f32 = 3.4028234663852886e38;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> row_starts: array<u32>;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<Greedy>;

var<workgroup> best_value: array<f32, WG>;
var<workgroup> best_id: array<u32, WG>;
var<workgroup> sums: array<f32, WG>;

// Tested on the bits: a compiler may assume floats are never NaN.
fn sanitised(x: f32) -> f32 {
  let bits = bitcast<u32>(x) & 0x7fffffffu;
  if (bits > 0x7f800000u) {
    return params.neg_inf;
  }
  if (bits == 0x7f800000u && x > 0.0) {
    return FLOAT32_MAX;
  }
  return x;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
  let row = wg.x;
  let start = row_starts[row];
  let neg_inf = params.neg_inf;

  // Each thread: best over ids tid, tid + WG, ... (ascending, so '>' keeps the lowest id of equals).
  var value = neg_inf;
  var id = 0xffffffffu;
  for (var i = tid; i < params.vocab; i += WG) {
    let x = sanitised(logits[start + i]);
    if (x > value) {
      value = x;
      id = i;
    }
  }
  best_value[tid] = value;
  best_id[tid] = id;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride) {
      let v = best_value[tid + stride];
      let j = best_id[tid + stride];
      if (v > best_value[tid] || (v == best_value[tid] && j < best_id[tid])) {
        best_value[tid] = v;
        best_id[tid] = j;
      }
    }
    workgroupBarrier();
  }
  let max_value = best_value[0];

  var sum = 0.0;
  if (max_value > neg_inf) {
    for (var i = tid; i < params.vocab; i += WG) {
      sum += exp(sanitised(logits[start + i]) - max_value);
    }
  }
  sums[tid] = sum;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride) {
      sums[tid] += sums[tid + stride];
    }
    workgroupBarrier();
  }
  if (tid == 0u) {
    if (max_value > neg_inf) {
      out[row] = Greedy(best_id[0], -log(sums[0]));
    } else {
      out[row] = Greedy(0u, neg_inf);
    }
  }
}

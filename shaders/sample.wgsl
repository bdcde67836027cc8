// Token sampling on the device: one workgroup per row of logits runs the CPU sampler's stages
// (src/engine/sampling/sampler.ts) and returns only the token id and, when asked, logprobs:
//   0. sanitise: NaN -> -inf, +inf -> largest float32 (the "raw" logits; logprobs come from these)
//   1. logit_bias, then allowed_token_ids (all others -inf)   2. repetition_penalty (prompt + generated ids)   3. frequency / presence (generated)
//   4. temperature 0: argmax, lowest id on ties (raw argmax if everything was filtered)
//   5. (x - max) / T   6. top-k (ties with the kth kept)   7. top-p (smallest top set with mass >= p;
//      lowest ids first among equal weights)   8. min-p   9. inverse CDF over softmax, ids ascending,
//      at u * total, u drawn on the host from the request's xoshiro128** stream (rng.ts)
// Differences from the CPU: float32 instead of float64 for the sums, exp and the temperature division,
// and sums in another order. Results equal the CPU's except when a value falls within float32
// rounding of a cut (top-p mass, min-p ratio, the draw's CDF step). Top-k's threshold is exact: a
// bitwise binary search over the order-preserving integer keys of the floats (no sort).
//
// Sparse per-row lists (`edits`): logit_bias {id, bias}, seen ids {id, _} for repetition_penalty,
// generated ids {id, count} for frequency / presence. Ids are distinct within a list and < vocab.
// allowed_token_ids, when set, is a bitmask over the vocabulary in the `id` fields of
// ceil(vocab / 32) edits from allowed_start (bit i % 32 of word i / 32).

struct Params {
  vocab: u32,
  rows: u32,
  // -inf, from the host: WGSL constant expressions cannot hold an infinity.
  neg_inf: f32,
  // 32 and WG / 2, from the host: loop bounds the compiler cannot see stop it from unrolling the
  // many inlined reductions and searches, which made lavapipe's first compile take over a minute.
  key_bits: u32,
  half_wg: u32,
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
}

struct Settings {
  temperature: f32,
  top_k: u32,
  top_p: f32,
  min_p: f32,
  frequency: f32,
  presence: f32,
  repetition: f32,
  u: f32,
  bias_start: u32,
  bias_count: u32,
  seen_start: u32,
  seen_count: u32,
  generated_start: u32,
  generated_count: u32,
  top_logprobs: u32,
  logprobs: u32,
  allowed_start: u32,
  allowed: u32,  // 1: only the ids in the mask may be generated
}

struct Edit {
  id: u32,
  value: f32,
}

struct Choice {
  id: u32,
  logprob: f32,
}

const WG: u32 = 256u;
const MAX_TOP: u32 = 20u;
const NONE: u32 = 0xffffffffu;
const FLOAT32_MAX: f32 = 3.4028234663852886e38;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> row_starts: array<u32>;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read> settings: array<Settings>;
@group(0) @binding(4) var<storage, read> edits: array<Edit>;
@group(0) @binding(5) var<storage, read_write> work: array<f32>;   // (rows, vocab) scratch
@group(0) @binding(6) var<storage, read_write> out: array<Choice>;  // (rows)
@group(0) @binding(7) var<storage, read_write> top: array<Choice>;  // (rows, MAX_TOP)

var<workgroup> row_settings: Settings;
var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_u: array<u32, WG>;
var<workgroup> top_ids: array<u32, MAX_TOP>;
var<workgroup> chosen: u32;

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

// Order-preserving integer key of a float (no NaN here): a < b iff key(a) < key(b); -0 and +0 are equal.
fn key(v: f32) -> u32 {
  if (v == 0.0) {
    return 0x80000000u;
  }
  let b = bitcast<u32>(v);
  if ((b & 0x80000000u) != 0u) {
    return ~b;
  }
  return b | 0x80000000u;
}

// Workgroup reductions. Each starts with a barrier so nobody overwrites the previous result while a
// slower invocation still reads it, and returns a uniform value (usable in control flow).
fn reduce_max(tid: u32, v: f32) -> f32 {
  workgroupBarrier();
  red_f[tid] = v;
  for (var s = params.half_wg; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (tid < s) {
      red_f[tid] = max(red_f[tid], red_f[tid + s]);
    }
  }
  return workgroupUniformLoad(&red_f[0]);
}

fn reduce_sum(tid: u32, v: f32) -> f32 {
  workgroupBarrier();
  red_f[tid] = v;
  for (var s = params.half_wg; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (tid < s) {
      red_f[tid] += red_f[tid + s];
    }
  }
  return workgroupUniformLoad(&red_f[0]);
}

fn reduce_count(tid: u32, v: u32) -> u32 {
  workgroupBarrier();
  red_u[tid] = v;
  for (var s = params.half_wg; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (tid < s) {
      red_u[tid] += red_u[tid + s];
    }
  }
  return workgroupUniformLoad(&red_u[0]);
}

// Largest value, lowest id among equals; NONE when every value is -inf.
fn reduce_argmax(tid: u32, value: f32, id: u32) -> u32 {
  workgroupBarrier();
  red_f[tid] = value;
  red_u[tid] = id;
  for (var s = params.half_wg; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (tid < s) {
      let v = red_f[tid + s];
      let j = red_u[tid + s];
      if (j != NONE && (red_u[tid] == NONE || v > red_f[tid] || (v == red_f[tid] && j < red_u[tid]))) {
        red_f[tid] = v;
        red_u[tid] = j;
      }
    }
  }
  return workgroupUniformLoad(&red_u[0]);
}

// This invocation's best (value > -inf) over ids tid, tid + WG, ... of the raw logits, skipping `skip` top entries.
fn raw_argmax(tid: u32, start: u32, skip: u32) -> u32 {
  var best = params.neg_inf;
  var id = NONE;
  for (var i = tid; i < params.vocab; i += WG) {
    var taken = false;
    for (var j = 0u; j < skip; j++) {
      taken = taken || top_ids[j] == i;
    }
    let x = sanitised(logits[start + i]);
    if (!taken && x > params.neg_inf && (id == NONE || x > best)) {
      best = x;
      id = i;
    }
  }
  return reduce_argmax(tid, best, id);
}

fn work_argmax(tid: u32, base: u32) -> u32 {
  var best = params.neg_inf;
  var id = NONE;
  for (var i = tid; i < params.vocab; i += WG) {
    let x = work[base + i];
    if (x > params.neg_inf && (id == NONE || x > best)) {
      best = x;
      id = i;
    }
  }
  return reduce_argmax(tid, best, id);
}

fn work_max(tid: u32, base: u32) -> f32 {
  var m = params.neg_inf;
  for (var i = tid; i < params.vocab; i += WG) {
    m = max(m, work[base + i]);
  }
  return reduce_max(tid, m);
}

fn sync_work() {
  storageBarrier();
  workgroupBarrier();
}

// Stage 6: keeps values >= the kth largest (ties kept). The threshold is the largest key t with
// count(key >= t) >= k, built bit by bit from the top.
fn top_k(tid: u32, base: u32, k: u32) {
  var finite = 0u;
  for (var i = tid; i < params.vocab; i += WG) {
    finite += select(0u, 1u, work[base + i] > params.neg_inf);
  }
  if (reduce_count(tid, finite) < k) {
    return;
  }
  var t = 0u;
  for (var bit = i32(params.key_bits) - 1i; bit >= 0i; bit--) {
    let candidate = t | (1u << u32(bit));
    var n = 0u;
    for (var i = tid; i < params.vocab; i += WG) {
      let x = work[base + i];
      n += select(0u, 1u, x > params.neg_inf && key(x) >= candidate);
    }
    if (reduce_count(tid, n) >= k) {
      t = candidate;
    }
  }
  for (var i = tid; i < params.vocab; i += WG) {
    let x = work[base + i];
    if (!(x > params.neg_inf) || key(x) < t) {
      work[base + i] = params.neg_inf;
    }
  }
  sync_work();
}

fn weight(x: f32, m: f32) -> f32 {
  return select(0.0, exp(x - m), x > params.neg_inf);
}

// Stage 7: the weight tau at which the descending cumulative mass reaches p * total is the largest
// weight t with mass(w >= t) >= goal (positive floats order as their bits). Everything above tau
// stays, and of the weights equal to tau the lowest ids, as many as the walk needed.
fn top_p(tid: u32, base: u32, p: f32) {
  let m = work_max(tid, base);
  if (!(m > params.neg_inf)) {
    return;
  }
  var s = 0.0;
  for (var i = tid; i < params.vocab; i += WG) {
    s += weight(work[base + i], m);
  }
  let goal = p * reduce_sum(tid, s);
  var t = 0u;
  for (var bit = i32(params.key_bits) - 1i; bit >= 0i; bit--) {
    let candidate = t | (1u << u32(bit));
    var mass = 0.0;
    for (var i = tid; i < params.vocab; i += WG) {
      let w = weight(work[base + i], m);
      mass += select(0.0, w, w > 0.0 && bitcast<u32>(w) >= candidate);
    }
    if (reduce_sum(tid, mass) >= goal) {
      t = candidate;
    }
  }
  let tau = bitcast<f32>(t);
  var above = 0.0;
  var ties = 0u;
  for (var i = tid; i < params.vocab; i += WG) {
    let w = weight(work[base + i], m);
    above += select(0.0, w, w > tau);
    ties += select(0u, 1u, w == tau && w > 0.0);
  }
  let above_mass = reduce_sum(tid, above);
  let tie_count = reduce_count(tid, ties);
  var needed = 0u;
  var acc = above_mass;
  loop {
    if (needed >= tie_count) {
      break;
    }
    needed++;
    acc += tau;
    if (acc >= goal) {
      break;
    }
  }
  // Rank the ties by id: contiguous chunks per invocation, then an exclusive prefix over the chunks.
  let chunk = (params.vocab + WG - 1u) / WG;
  let lo = min(tid * chunk, params.vocab);
  let hi = min(lo + chunk, params.vocab);
  var mine = 0u;
  for (var i = lo; i < hi; i++) {
    let w = weight(work[base + i], m);
    mine += select(0u, 1u, w == tau && w > 0.0);
  }
  workgroupBarrier();
  red_u[tid] = mine;
  workgroupBarrier();
  var rank = 0u;
  for (var j = 0u; j < tid; j++) {
    rank += red_u[j];
  }
  for (var i = lo; i < hi; i++) {
    let w = weight(work[base + i], m);
    if (w > tau) {
      continue;
    }
    if (w == tau && w > 0.0 && rank < needed) {
      rank++;
      continue;
    }
    work[base + i] = params.neg_inf;
  }
  sync_work();
}

// Stage 8: keeps exp(x - max) >= min_p.
fn min_p(tid: u32, base: u32, p: f32) {
  let m = work_max(tid, base);
  if (!(m > params.neg_inf)) {
    return;
  }
  for (var i = tid; i < params.vocab; i += WG) {
    if (!(exp(work[base + i] - m) >= p)) {
      work[base + i] = params.neg_inf;
    }
  }
  sync_work();
}

// Stage 9: inverse CDF in ascending id order; the last id with weight > 0 if rounding runs past the end.
fn draw(tid: u32, base: u32, u: f32) -> u32 {
  let m = work_max(tid, base);
  if (!(m > params.neg_inf)) {
    return NONE;
  }
  let chunk = (params.vocab + WG - 1u) / WG;
  let lo = min(tid * chunk, params.vocab);
  let hi = min(lo + chunk, params.vocab);
  var s = 0.0;
  for (var i = lo; i < hi; i++) {
    s += weight(work[base + i], m);
  }
  workgroupBarrier();
  red_f[tid] = s;
  workgroupBarrier();
  if (tid == 0u) {
    var total = 0.0;
    for (var c = 0u; c < WG; c++) {
      total += red_f[c];
    }
    let goal = u * total;
    var cumulative = 0.0;
    var result = NONE;
    for (var c = 0u; c < WG && result == NONE; c++) {
      if (red_f[c] == 0.0) {
        continue;
      }
      if (cumulative + red_f[c] <= goal) {
        cumulative += red_f[c];
        continue;
      }
      let first = min(c * chunk, params.vocab);
      let last = min(first + chunk, params.vocab);
      for (var i = first; i < last; i++) {
        let w = weight(work[base + i], m);
        if (w == 0.0) {
          continue;
        }
        cumulative += w;
        result = i;
        if (cumulative > goal) {
          break;
        }
      }
      if (cumulative <= goal) {
        result = NONE; // rounding: the chunk sum said yes, its elements said no; go on
      }
    }
    if (result == NONE) {
      // Past the end by rounding: the last id with weight > 0, as the CPU walk ends.
      for (var i = params.vocab; i > 0u; i--) {
        if (weight(work[base + i - 1u], m) > 0.0) {
          result = i - 1u;
          break;
        }
      }
    }
    chosen = result;
  }
  return workgroupUniformLoad(&chosen);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
  let row = wg.x;
  if (tid == 0u) {
    row_settings = settings[row];
  }
  let st = workgroupUniformLoad(&row_settings);
  let start = row_starts[row];
  let base = row * params.vocab;

  for (var i = tid; i < params.vocab; i += WG) {
    work[base + i] = sanitised(logits[start + i]);
  }
  sync_work();
  for (var j = tid; j < st.bias_count; j += WG) {
    let e = edits[st.bias_start + j];
    work[base + e.id] += e.value;
  }
  sync_work();
  if (st.allowed != 0u) {
    for (var i = tid; i < params.vocab; i += WG) {
      if (((edits[st.allowed_start + i / 32u].id >> (i % 32u)) & 1u) == 0u) {
        work[base + i] = params.neg_inf;
      }
    }
    sync_work();
  }
  if (st.repetition != 1.0) {
    for (var j = tid; j < st.seen_count; j += WG) {
      let id = edits[st.seen_start + j].id;
      let v = work[base + id];
      work[base + id] = select(v * st.repetition, v / st.repetition, v > 0.0);
    }
    sync_work();
  }
  if (st.frequency != 0.0 || st.presence != 0.0) {
    for (var j = tid; j < st.generated_count; j += WG) {
      let e = edits[st.generated_start + j];
      work[base + e.id] -= e.value * st.frequency + st.presence;
    }
    sync_work();
  }

  var id = NONE;
  if (st.temperature == 0.0) {
    id = work_argmax(tid, base);
  } else {
    let m = work_max(tid, base);
    if (m > params.neg_inf) {
      for (var i = tid; i < params.vocab; i += WG) {
        work[base + i] = (work[base + i] - m) / st.temperature;
      }
      sync_work();
    }
    if (st.top_k > 0u && st.top_k < params.vocab) {
      top_k(tid, base, st.top_k);
    }
    if (st.top_p < 1.0) {
      top_p(tid, base, st.top_p);
    }
    if (st.min_p > 0.0) {
      min_p(tid, base, st.min_p);
    }
    id = draw(tid, base, st.u);
  }
  if (id == NONE) {
    id = raw_argmax(tid, start, 0u);
    if (id == NONE) {
      id = 0u;
    }
  }

  var logprob = 0.0;
  if (st.logprobs != 0u) {
    var m = params.neg_inf;
    for (var i = tid; i < params.vocab; i += WG) {
      m = max(m, sanitised(logits[start + i]));
    }
    let max_raw = reduce_max(tid, m);
    var s = 0.0;
    for (var i = tid; i < params.vocab; i += WG) {
      s += exp(sanitised(logits[start + i]) - max_raw);
    }
    let lse = max_raw + log(reduce_sum(tid, s));
    logprob = sanitised(logits[start + id]) - lse;
    let n = min(st.top_logprobs, MAX_TOP);
    for (var j = 0u; j < n; j++) {
      let best = raw_argmax(tid, start, j);
      if (tid == 0u) {
        top_ids[j] = best;
        if (best == NONE) {
          top[row * MAX_TOP + j] = Choice(NONE, params.neg_inf);
        } else {
          top[row * MAX_TOP + j] = Choice(best, sanitised(logits[start + best]) - lse);
        }
      }
      workgroupBarrier();
    }
  }
  if (tid == 0u) {
    out[row] = Choice(id, logprob);
  }
}

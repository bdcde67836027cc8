import type { TokenCounts } from './token-counts.js';

/**
 * Logits processors. Each one rewrites a (vocab) Float32Array IN PLACE and returns nothing; a filtered
 * token becomes -Infinity. Given logits free of NaN and +Infinity (the sampler clamps them first), none
 * of them writes NaN. The sampler runs them on its own scratch copy, never on the model's output.
 */

const FLOAT32_MAX = 3.4028234663852886e38;

/**
 * Copies a model's logits into `out` with NaN as -Infinity and +Infinity as the largest float32: what
 * every processor expects (a row's first `out.length` entries; `out` may be shorter than `logits`).
 */
export function copySanitized(logits: Float32Array, out: Float32Array): void {
  for (let i = 0; i < out.length; i++) {
    const v = logits[i];
    out[i] = Number.isNaN(v) ? -Infinity : v === Infinity ? FLOAT32_MAX : v;
  }
}

/** logit[id] += bias for each entry (OpenAI logit_bias). */
export function applyLogitBias(logits: Float32Array, bias: ReadonlyMap<number, number>): void {
  for (const [id, value] of bias) {
    if (id >= 0 && id < logits.length) logits[id] += value;
  }
}

/** vLLM allowed_token_ids: every other token becomes -Infinity. */
export function applyAllowedTokens(logits: Float32Array, allowed: ReadonlySet<number> | undefined): void {
  if (!allowed) return;
  for (let i = 0; i < logits.length; i++) if (!allowed.has(i)) logits[i] = -Infinity;
}

/**
 * CTRL / HF repetition penalty over every id in `seen` (prompt + generated): a positive logit is
 * divided by the penalty, a negative one multiplied, so penalty > 1 always makes the token less likely.
 */
export function applyRepetitionPenalty(logits: Float32Array, seen: TokenCounts, penalty: number): void {
  if (penalty === 1) return;
  for (const id of seen.distinct) {
    if (id >= logits.length) continue;
    const v = logits[id];
    logits[id] = v > 0 ? v / penalty : v * penalty;
  }
}

/**
 * OpenAI frequency and presence penalties over the GENERATED tokens only (as vLLM):
 * logit[j] -= count[j] * frequency + (count[j] > 0) * presence.
 */
export function applyFrequencyPresencePenalties(
  logits: Float32Array,
  generated: TokenCounts,
  frequency: number,
  presence: number,
): void {
  if (frequency === 0 && presence === 0) return;
  for (const id of generated.distinct) {
    if (id >= logits.length) continue;
    logits[id] -= generated.counts[id] * frequency + presence;
  }
}

/** Largest finite-or-infinite value, ignoring NaN; -Infinity when there is none. */
export function maxLogit(logits: Float32Array): number {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  return max;
}

/**
 * argmax(copySanitized(logits)) without the copy: a NaN never wins, +Infinity counts as the largest float32 (so the
 * first of several such wins, as after sanitising). One pass where the copy, a second copy and argmax took three.
 */
export function sanitizedArgmax(logits: Float32Array): number {
  let best = 0;
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i];
    if (v > max) {
      max = v;
      best = i;
    }
  }
  // +Infinity and the largest float32 tie once sanitised: the first of them wins.
  if (max >= FLOAT32_MAX) return logits.findIndex((v) => v >= FLOAT32_MAX);
  return best;
}

/** Index of the largest logit, the lowest id among equals; 0 when every value is -Infinity or NaN. */
export function argmax(logits: Float32Array): number {
  let best = 0;
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i] > max) {
      max = logits[i];
      best = i;
    }
  }
  return best;
}

/**
 * Temperature T > 0: logit = (logit - max) / T. Subtracting the max first changes nothing softmax or
 * the filters below can see (they are all shift-invariant) but keeps tiny T from overflowing to
 * +Infinity (and then NaN): every result is <= 0, the top token(s) exactly 0.
 */
export function applyTemperature(logits: Float32Array, temperature: number): void {
  const max = maxLogit(logits);
  if (max === -Infinity) return;
  for (let i = 0; i < logits.length; i++) logits[i] = (logits[i] - max) / temperature;
}

/**
 * Top-k: keeps every logit >= the kth largest, so ties at the boundary are all kept (as HF and vLLM:
 * `logits < kth_value` is what gets masked). k <= 0 or k >= vocab is a no-op.
 * Cost: one pass with a size-k min-heap, O(V log k); no full sort.
 */
export function applyTopK(logits: Float32Array, k: number): void {
  if (k <= 0 || k >= logits.length) return;
  const kth = kthLargest(logits, k);
  if (kth === -Infinity) return;
  for (let i = 0; i < logits.length; i++) if (!(logits[i] >= kth)) logits[i] = -Infinity;
}

/** The kth largest value (1-based) among the non-NaN entries, -Infinity when there are fewer than k. */
function kthLargest(values: Float32Array, k: number): number {
  const heap = new Float64Array(k); // min-heap of the k largest seen so far
  let size = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!(v > -Infinity)) continue;
    if (size < k) {
      let j = size++;
      while (j > 0) {
        const parent = (j - 1) >> 1;
        if (heap[parent] <= v) break;
        heap[j] = heap[parent];
        j = parent;
      }
      heap[j] = v;
    } else if (v > heap[0]) {
      siftDown(heap, size, v);
    }
  }
  return size < k ? -Infinity : heap[0];
}

/** Replaces the root of a min-heap with `v` and restores the order. */
function siftDown(heap: Float64Array, size: number, v: number): void {
  let j = 0;
  for (;;) {
    let child = 2 * j + 1;
    if (child >= size) break;
    if (child + 1 < size && heap[child + 1] < heap[child]) child++;
    if (heap[child] >= v) break;
    heap[j] = heap[child];
    j = child;
  }
  heap[j] = v;
}

/**
 * Top-p (nucleus): keeps the smallest set of highest-probability tokens whose cumulative probability
 * reaches p (>= p, so an exact hit stops there), at least one token. Order among equal probabilities:
 * lower id first, so the cut is deterministic. Probabilities are softmax of the current logits, summed
 * in float64. p >= 1 is a no-op.
 *
 * Cost: instead of sorting the whole vocabulary, it sorts only the tokens above a probability threshold,
 * lowering the threshold until their mass reaches p. Tokens above a threshold are a prefix of the full
 * sorted order, so the result is exactly that of a full sort.
 */
export function applyTopP(logits: Float32Array, p: number): void {
  if (p >= 1) return;
  const max = maxLogit(logits);
  if (max === -Infinity) return;
  const n = logits.length;
  const weights = new Float64Array(n); // (vocab) exp(logit - max), unnormalised probabilities
  let total = 0;
  for (let i = 0; i < n; i++) {
    const w = logits[i] > -Infinity ? Math.exp(logits[i] - max) : 0;
    weights[i] = w;
    total += w;
  }
  const target = p * total;

  // Only the weights matter for the cut (ties are settled by id below), so gather just those.
  const candidates = new Float64Array(n); // weights >= ratio x the top weight, in [0, count)
  let count = 0;
  for (const ratio of [1e-3, 1e-7, 0]) {
    count = 0;
    let mass = 0;
    for (let i = 0; i < n; i++) {
      const w = weights[i];
      if (w > 0 && w >= ratio) {
        candidates[count++] = w;
        mass += w;
      }
    }
    if (mass >= target) break;
  }
  // Walk the candidate weights from the largest down (a native typed-array sort, no comparator) to
  // find the weight tau at which the mass reaches the target, and how many tokens of weight tau it took.
  const sorted = candidates.subarray(0, count).sort(); // ascending
  let cumulative = 0;
  let tau = 0;
  let needed = 0;
  for (let j = sorted.length - 1; j >= 0; j--) {
    if (sorted[j] !== tau) {
      tau = sorted[j];
      needed = 0;
    }
    needed++;
    cumulative += sorted[j];
    if (cumulative >= target) break;
  }
  // Keep everything above tau, and the lowest ids among the tokens tied at tau.
  for (let i = 0; i < n; i++) {
    if (weights[i] > tau) continue;
    if (weights[i] === tau && needed > 0) needed--;
    else logits[i] = -Infinity;
  }
}

/**
 * Min-p: keeps tokens whose probability is >= minP x the top probability. The ratio of two
 * probabilities does not depend on the normaliser, so this is exp(logit - max) >= minP. minP <= 0 is
 * a no-op; the top token always survives (minP <= 1).
 */
export function applyMinP(logits: Float32Array, minP: number): void {
  if (minP <= 0) return;
  const max = maxLogit(logits);
  if (max === -Infinity) return;
  for (let i = 0; i < logits.length; i++) {
    if (!(Math.exp(logits[i] - max) >= minP)) logits[i] = -Infinity;
  }
}

/** Log-probabilities for the API's `logprobs` / `top_logprobs`, from one (vocab) row of logits. */

export interface TokenLogprob {
  tokenId: number;
  logprob: number;
}

/** log(sum(exp(logits))) in float64 with the max shifted out; -Infinity when every logit is -Infinity. */
export function logSumExp(logits: Float32Array): number {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  return max + Math.log(sum);
}

/**
 * The n highest log-probabilities, sorted by logprob descending and then id ascending.
 * One pass with an n-slot insertion list (n <= 20), no sort of the vocabulary.
 */
export function topLogprobs(logits: Float32Array, n: number, lse: number): TokenLogprob[] {
  if (n <= 0) return [];
  const ids: number[] = [];
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i];
    // Scanning ids upwards, an equal value never displaces an earlier (lower) id.
    if (ids.length === n && !(v > logits[ids[n - 1]])) continue;
    let j = ids.length < n ? ids.length : n - 1;
    ids[j] = i;
    while (j > 0 && v > logits[ids[j - 1]]) {
      ids[j] = ids[j - 1];
      ids[j - 1] = i;
      j--;
    }
  }
  return ids.map((tokenId) => ({ tokenId, logprob: logits[tokenId] - lse }));
}

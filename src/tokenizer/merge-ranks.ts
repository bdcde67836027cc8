/**
 * A BPE model's merge ranks held by token-id pair in typed arrays, in place of @huggingface/tokenizers'
 * (0.2.0) Map keyed by JSON text (`'["Ġ","t"]'` -> rank): one string and one Map entry per merge, 16 MiB of
 * heap for Qwen3's 151,387 merges and 45 MiB for Gemma 3's 514,906, in an isolate of 128 MB. Here a merge
 * (a, b) is found in a's row of the pairs sorted by b: 8 bytes a merge plus 4 a token (1.8 and 5 MiB of
 * ArrayBuffers), and no JSON text is built on each lookup (encoding got faster, not slower).
 *
 * The model consults the ranks in one place, add_node(queue, node): the rank of (node.token,
 * node.next.token), if any, orders the queue. The replacement answers the same: a pair of vocabulary tokens
 * has the rank the Map gave it (the last, for a merge listed twice, as `new Map(entries)` keeps), and a
 * pair with a half outside the vocabulary has none, which the Map agrees with only when every merge's
 * halves are in the vocabulary: a model where one is not keeps its Map.
 */

interface BpeInternals {
  tokens_to_ids: Pick<Map<string, number>, 'get'>;
  bpe_ranks: Map<string, number>;
  add_node: (queue: { push(node: unknown): void }, node: BpeNode) => void;
}
interface BpeNode {
  token: string;
  bias: number;
  score?: number;
  next: BpeNode | null;
}

/**
 * Swaps `model`'s rank Map for id-pair rows, given the merges it was built from (`merges[i]` has rank i).
 * Returns false, changing nothing, where the model is not the BPE this was written against or a merge has
 * a half outside its vocabulary.
 */
export function compactMergeRanks(model: unknown, merges: readonly (readonly [string, string])[]): boolean {
  const m = model as Partial<BpeInternals>;
  const ids = m.tokens_to_ids;
  if (typeof ids?.get !== 'function' || !(m.bpe_ranks instanceof Map) || typeof m.add_node !== 'function') return false;
  if (m.bpe_ranks.size === 0) return false;
  const n = merges.length;
  const left = new Int32Array(n);
  const right = new Int32Array(n);
  let maxId = 0;
  for (let i = 0; i < n; i++) {
    const a = ids.get(merges[i][0]);
    const b = ids.get(merges[i][1]);
    if (a === undefined || b === undefined) return false;
    left[i] = a;
    right[i] = b;
    maxId = Math.max(maxId, a, b);
  }
  const { start, rowRight, rowRank } = rows(left, right, maxId);

  const rank = (a: number, b: number): number => {
    if (a > maxId) return -1;
    let lo = start[a];
    let hi = start[a + 1];
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const r = rowRight[mid];
      if (r === b) return rowRank[mid];
      if (r < b) lo = mid + 1;
      else hi = mid;
    }
    return -1;
  };
  m.add_node = (queue, node) => {
    const a = ids.get(node.token);
    const b = ids.get(node.next!.token);
    if (a === undefined || b === undefined) return;
    const r = rank(a, b);
    if (r >= 0) {
      node.score = r + node.bias;
      queue.push(node);
    }
  };
  m.bpe_ranks = new Map();
  return true;
}

/** The merges (left[i], right[i]) as rows by left id, each sorted by right id, with their ranks. */
function rows(left: Int32Array, right: Int32Array, maxId: number) {
  const n = left.length;
  // Rows by left id (counting sort), each row sorted by right id; a pair listed twice keeps its last rank.
  const start = new Uint32Array(maxId + 2);
  for (let i = 0; i < n; i++) start[left[i] + 1]++;
  for (let a = 0; a <= maxId; a++) start[a + 1] += start[a];
  const order = new Int32Array(n);
  const fill = start.slice(0, maxId + 1);
  for (let i = 0; i < n; i++) order[fill[left[i]]++] = i;
  const rowRight = new Int32Array(n);
  const rowRank = new Int32Array(n);
  for (let a = 0; a <= maxId; a++) {
    const row = Array.from(order.subarray(start[a], start[a + 1]));
    row.sort((x, y) => right[x] - right[y] || x - y);
    let k = start[a];
    for (const i of row) {
      if (k > start[a] && rowRight[k - 1] === right[i]) rowRank[k - 1] = i;
      else {
        rowRight[k] = right[i];
        rowRank[k] = i;
        k++;
      }
    }
    for (let j = k; j < start[a + 1]; j++) rowRight[j] = 0x7fffffff; // emptied by a repeat: never matched
  }

  return { start, rowRight, rowRank };
}

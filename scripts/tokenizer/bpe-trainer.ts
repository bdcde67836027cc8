/**
 * Byte-level BPE training (the algorithm of Sennrich et al. / GPT-2), with incremental pair counts so a
 * merge touches only the words that contain its pair instead of rescanning the corpus.
 *
 * Determinism: the pair merged next is the one with the highest count; ties go to the smallest
 * (left id, right id). Ids are assigned in a fixed order (bytes first, then merges in order), so the
 * same word counts always give the same merges.
 */

export interface BpeTrainingResult {
  /** Token strings in id order, starting at id `firstId` (byte tokens first, then merged tokens). */
  tokens: string[];
  /** Merges in rank order, as [left, right] token strings. */
  merges: [string, string][];
}

export interface BpeTrainingOptions {
  /** The byte-level spelling of the 256 bytes, in byte order: the initial alphabet. */
  alphabet: readonly string[];
  /** Stop once this many tokens (alphabet + merged) exist. */
  maxTokens: number;
}

// Pair keys pack (left, right) into one number; ids stay below 2^21 so the product is exact in a double.
const ID_LIMIT = 1 << 21;
const pairKey = (left: number, right: number) => left * ID_LIMIT + right;

interface HeapEntry {
  count: number;
  left: number;
  right: number;
}

/** True when a should be merged before b. */
function better(a: HeapEntry, b: HeapEntry): boolean {
  if (a.count !== b.count) return a.count > b.count;
  if (a.left !== b.left) return a.left < b.left;
  return a.right < b.right;
}

/** Binary max-heap by `better`. Entries go stale when counts change; the trainer skips those on pop. */
class PairHeap {
  private readonly items: HeapEntry[] = [];

  push(entry: HeapEntry): void {
    const items = this.items;
    items.push(entry);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!better(items[i], items[parent])) break;
      [items[i], items[parent]] = [items[parent], items[i]];
      i = parent;
    }
  }

  pop(): HeapEntry | undefined {
    const items = this.items;
    if (items.length === 0) return undefined;
    const top = items[0];
    const last = items.pop()!;
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let best = i;
        if (l < items.length && better(items[l], items[best])) best = l;
        if (r < items.length && better(items[r], items[best])) best = r;
        if (best === i) break;
        [items[i], items[best]] = [items[best], items[i]];
        i = best;
      }
    }
    return top;
  }
}

/**
 * Learns merges from pre-tokenized words. `words` maps each word's byte-level spelling (one alphabet
 * character per byte) to how often it occurs.
 */
export function trainBpe(words: ReadonlyMap<string, number>, options: BpeTrainingOptions): BpeTrainingResult {
  const { alphabet, maxTokens } = options;
  const tokens = [...alphabet];
  const idOf = new Map<string, number>(tokens.map((t, i) => [t, i]));

  const symbols: number[][] = []; // per unique word: its current token ids
  const freqs: number[] = [];
  for (const [word, freq] of words) {
    symbols.push(
      Array.from(word, (ch) => {
        const id = idOf.get(ch);
        if (id === undefined) throw new Error(`character ${JSON.stringify(ch)} is not in the alphabet`);
        return id;
      }),
    );
    freqs.push(freq);
  }

  const counts = new Map<number, number>(); // pair key -> occurrences weighted by word frequency
  const where = new Map<number, Set<number>>(); // pair key -> words that contain (or once contained) it
  const addWordPairs = (w: number, sign: 1 | -1, touched: Set<number> | null) => {
    const s = symbols[w];
    for (let i = 0; i + 1 < s.length; i++) {
      const key = pairKey(s[i], s[i + 1]);
      counts.set(key, (counts.get(key) ?? 0) + sign * freqs[w]);
      if (sign > 0) {
        let set = where.get(key);
        if (!set) {
          set = new Set();
          where.set(key, set);
        }
        set.add(w);
      }
      touched?.add(key);
    }
  };
  for (let w = 0; w < symbols.length; w++) addWordPairs(w, 1, null);

  const heap = new PairHeap();
  const pushPair = (key: number) => {
    const count = counts.get(key) ?? 0;
    if (count > 0) heap.push({ count, left: Math.floor(key / ID_LIMIT), right: key % ID_LIMIT });
  };
  for (const key of counts.keys()) pushPair(key);

  const merges: [string, string][] = [];
  while (tokens.length < maxTokens) {
    const best = popValid(heap, counts);
    if (!best) break; // every word is a single token: the corpus supports no more merges
    const { left, right } = best;
    const merged = tokens[left] + tokens[right];
    // Two different merges can spell the same string ("ab"+"c", "a"+"bc"); they share one id, as in HF's trainer.
    let id = idOf.get(merged);
    if (id === undefined) {
      id = tokens.length;
      if (id >= ID_LIMIT) throw new Error('vocabulary too large for pair keys');
      tokens.push(merged);
      idOf.set(merged, id);
    }
    merges.push([tokens[left], tokens[right]]);

    const touched = new Set<number>();
    const key = pairKey(left, right);
    for (const w of [...(where.get(key) ?? [])]) {
      const s = symbols[w];
      if (!containsPair(s, left, right)) continue;
      addWordPairs(w, -1, touched);
      symbols[w] = replacePair(s, left, right, id);
      addWordPairs(w, 1, touched);
    }
    where.delete(key);
    for (const k of touched) pushPair(k);
  }
  return { tokens, merges };
}

function popValid(heap: PairHeap, counts: Map<number, number>): HeapEntry | undefined {
  for (let e = heap.pop(); e; e = heap.pop()) {
    if ((counts.get(pairKey(e.left, e.right)) ?? 0) === e.count) return e;
  }
  return undefined;
}

function containsPair(s: number[], left: number, right: number): boolean {
  for (let i = 0; i + 1 < s.length; i++) if (s[i] === left && s[i + 1] === right) return true;
  return false;
}

/** Replaces non-overlapping (left, right) occurrences, scanning left to right like BPE does. */
function replacePair(s: number[], left: number, right: number, id: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < s.length; i++) {
    if (i + 1 < s.length && s[i] === left && s[i + 1] === right) {
      out.push(id);
      i++;
    } else {
      out.push(s[i]);
    }
  }
  return out;
}

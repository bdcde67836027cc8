/**
 * A token -> id index for a large vocabulary, in place of @huggingface/tokenizers' (0.2.0) Map: a Map entry
 * costs ~54 bytes of heap beside its key (14 MiB at Gemma 3's 262,145 ids, 7 MiB at Qwen3's 151,669), this
 * open-addressing table 4 bytes a slot in an Int32Array plus the keys it shares with the vocabulary array.
 * After a Tokenizer is built the model reads its index only with get() and has() (its BPE encode, fuse_unk
 * and token_to_id), so that is all this answers; the entries are the Map's, added tokens included.
 */
export class VocabIndex {
  private readonly slots: Int32Array;
  private readonly keys: string[] = [];
  private readonly values: number[] = [];
  private readonly mask: number;

  constructor(entries: Iterable<[string, number]>, count: number) {
    let size = 1024;
    while (size < count * 1.5) size *= 2;
    this.slots = new Int32Array(size).fill(-1);
    this.mask = size - 1;
    for (const [key, value] of entries) this.put(key, value);
  }

  get size(): number {
    return this.keys.length;
  }

  get(key: string): number | undefined {
    const k = this.find(key);
    return k < 0 ? undefined : this.values[k];
  }

  has(key: string): boolean {
    return this.find(key) >= 0;
  }

  private put(key: string, value: number): void {
    let slot = hash(key) & this.mask;
    for (;;) {
      const k = this.slots[slot];
      if (k < 0) break;
      if (this.keys[k] === key) {
        this.values[k] = value;
        return;
      }
      slot = (slot + 1) & this.mask;
    }
    this.slots[slot] = this.keys.length;
    this.keys.push(key);
    this.values.push(value);
  }

  /** The entry index of `key`, or -1. */
  private find(key: string): number {
    if (typeof key !== 'string') return -1;
    let slot = hash(key) & this.mask;
    for (;;) {
      const k = this.slots[slot];
      if (k < 0 || this.keys[k] === key) return k;
      slot = (slot + 1) & this.mask;
    }
  }
}

/** FNV-1a over UTF-16 code units. */
function hash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Puts a VocabIndex where `model` keeps its token -> id Map; false (nothing changed) where it keeps none. */
export function compactVocabIndex(model: unknown): boolean {
  const m = model as { tokens_to_ids?: unknown };
  if (!(m.tokens_to_ids instanceof Map)) return false;
  const map = m.tokens_to_ids as Map<string, number>;
  m.tokens_to_ids = new VocabIndex(map, map.size);
  return true;
}

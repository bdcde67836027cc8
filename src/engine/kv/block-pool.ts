/** Shape of one layer's cached keys (or values) for one token: kv_heads vectors of head_dim floats. */
export interface KvShape {
  numLayers: number;
  numKvHeads: number;
  headDim: number;
}

export type { KvDtype } from './kv-dtype.js';

/** How full the pool is; `free + used + cachedIdle === total` always. */
export interface BlockPoolStats {
  total: number;
  /** Blocks some sequence holds. */
  used: number;
  /** Blocks holding nothing. */
  free: number;
  /** Unreferenced blocks kept for prefix reuse; evicted least recently used first, when space is needed. */
  cachedIdle: number;
}

/**
 * The KV cache's bookkeeping, as vLLM's block pool is: a fixed number of blocks of `blockSize` tokens, with
 * reference counts, a free list, and the prefix cache's index (which full blocks hold which hash, and an LRU
 * of cached blocks no sequence holds). It knows nothing of sequences (the cache manager does) and holds no
 * bytes: the runner provides the memory (KvMemory), where block `id` of every layer lives.
 */
export class BlockPool {
  private readonly refCounts: Int32Array;
  private readonly freeList: number[] = [];
  /** Hash of each cached (full, immutable) block, or undefined. */
  private readonly hashes: (string | undefined)[];
  private readonly byHash = new Map<string, number>();
  /** Cached blocks with no references, oldest use first (Map keeps insertion order). */
  private readonly idle = new Map<number, true>();
  /** Blocks handed out (or evicted) over the pool's life, for counters. */
  evictions = 0;

  constructor(
    readonly shape: KvShape,
    readonly numBlocks: number,
    readonly blockSize: number,
  ) {
    if (!Number.isInteger(numBlocks) || numBlocks < 1)
      throw new RangeError(`a KV pool needs at least one block, got ${numBlocks}`);
    this.refCounts = new Int32Array(numBlocks);
    this.hashes = new Array(numBlocks).fill(undefined);
    // Lowest ids first: deterministic placement makes runs reproducible.
    for (let id = numBlocks - 1; id >= 0; id--) this.freeList.push(id);
  }

  /** A block to write into, with one reference, or null when every block is held. Evicts an idle cached block if it must. */
  allocate(): number | null {
    let id = this.freeList.pop();
    if (id === undefined) {
      const oldest = this.idle.keys().next();
      if (oldest.done) return null;
      id = oldest.value;
      this.idle.delete(id);
      this.uncache(id);
    }
    this.refCounts[id] = 1;
    return id;
  }

  /** Blocks that allocate() could hand out now. */
  get available(): number {
    return this.freeList.length + this.idle.size;
  }

  /** Of those, the blocks holding nothing: handing them out evicts no cached prefix. */
  get unused(): number {
    return this.freeList.length;
  }

  retain(id: number): void {
    if (this.refCounts[id] === 0) this.idle.delete(id);
    this.refCounts[id]++;
  }

  release(id: number): void {
    if (this.refCounts[id] <= 0) throw new Error(`KV block ${id} released more often than retained`);
    if (--this.refCounts[id] > 0) return;
    if (this.hashes[id] !== undefined) this.idle.set(id, true);
    else this.freeList.push(id);
  }

  refCount(id: number): number {
    return this.refCounts[id];
  }

  /** Whether block `id` is a full block cached under its prefix hash (held or idle). */
  isCached(id: number): boolean {
    return this.hashes[id] !== undefined;
  }

  /** A block may be written only by its sole holder and only while it is not a cached (immutable) block. */
  isWritable(id: number): boolean {
    return this.refCounts[id] === 1 && this.hashes[id] === undefined;
  }

  /** Registers a full block under its prefix hash; a hash already cached elsewhere keeps the older block. */
  cache(id: number, hash: string): void {
    if (this.hashes[id] !== undefined || this.byHash.has(hash)) return;
    this.hashes[id] = hash;
    this.byHash.set(hash, id);
  }

  lookup(hash: string): number | undefined {
    return this.byHash.get(hash);
  }

  /** Forgets every cached block no sequence holds (their bytes are free for reuse); returns how many. */
  evictIdle(): number {
    const n = this.idle.size;
    for (const id of this.idle.keys()) {
      this.uncache(id);
      this.freeList.push(id);
    }
    this.idle.clear();
    return n;
  }

  /**
   * Forgets every cached prefix, held blocks' included (the runner's memory lost their bytes): no lookup
   * finds them again, and a held block goes back to the free list when its holder lets go.
   */
  uncacheAll(): void {
    this.evictIdle();
    for (let id = 0; id < this.numBlocks; id++) if (this.hashes[id] !== undefined) this.uncache(id);
  }

  /** Evicts a cached block from the prefix cache's index (its bytes are free for reuse). */
  private uncache(id: number): void {
    this.byHash.delete(this.hashes[id]!);
    this.hashes[id] = undefined;
    this.evictions++;
  }

  stats(): BlockPoolStats {
    let used = 0;
    for (const c of this.refCounts) if (c > 0) used++;
    return { total: this.numBlocks, used, free: this.freeList.length, cachedIdle: this.idle.size };
  }

  /** Throws if the bookkeeping is inconsistent; property tests call it after every operation. */
  checkInvariants(): void {
    const { total, used, free, cachedIdle } = this.stats();
    if (used + free + cachedIdle !== total)
      throw new Error(`KV blocks leaked: used ${used} + free ${free} + cached ${cachedIdle} != ${total}`);
    for (let id = 0; id < this.numBlocks; id++) {
      const c = this.refCounts[id];
      if (c < 0) throw new Error(`KV block ${id} has negative reference count ${c}`);
      if (c === 0 && this.hashes[id] !== undefined && !this.idle.has(id))
        throw new Error(`cached block ${id} is neither held nor idle`);
      if (c > 0 && this.idle.has(id)) throw new Error(`held block ${id} is on the idle list`);
    }
    for (const [hash, id] of this.byHash)
      if (this.hashes[id] !== hash) throw new Error(`hash index disagrees for block ${id}`);
  }
}

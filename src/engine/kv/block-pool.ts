/** Shape of one layer's cached keys (or values) for one token: kv_heads vectors of head_dim floats. */
export interface KvShape {
  numLayers: number;
  numKvHeads: number;
  headDim: number;
}

export type KvArray = Float32Array | Uint16Array;

/** Element type of the KV pool: float32, or float16 (half the bytes per token; KV_DTYPE). */
export type KvDtype = 'fp32' | 'fp16';

/** The pool's per-layer arrays when a runner owns their memory (views into the kernels' linear memory). */
export interface KvStorage {
  keys: KvArray[];
  values: KvArray[];
}

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
 * The KV memory of record: a fixed number of blocks of `blockSize` tokens, with reference counts, a free
 * list, and the prefix cache's bookkeeping (which full blocks hold which hash, and an LRU of cached
 * blocks no sequence holds). It knows nothing of sequences; the cache manager does.
 *
 * Storage, per layer: keys and values each (numBlocks, kv_heads, blockSize, head_dim) floats, so one
 * head's run of tokens inside a block is contiguous and a gather copies one run per (block, head).
 */
export class BlockPool {
  /** Float32 elements, or float16 bits where the runner keeps a half-precision pool (KV_DTYPE fp16). */
  readonly keys: KvArray[];
  readonly values: KvArray[];
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
    /** Where the bytes live when a runner owns them (the kernels' linear memory); else JS arrays. */
    storage?: KvStorage,
  ) {
    if (!Number.isInteger(numBlocks) || numBlocks < 1)
      throw new RangeError(`a KV pool needs at least one block, got ${numBlocks}`);
    const floats = numBlocks * shape.numKvHeads * blockSize * shape.headDim;
    this.keys = storage?.keys ?? Array.from({ length: shape.numLayers }, () => new Float32Array(floats));
    this.values = storage?.values ?? Array.from({ length: shape.numLayers }, () => new Float32Array(floats));
    this.refCounts = new Int32Array(numBlocks);
    this.hashes = new Array(numBlocks).fill(undefined);
    // Lowest ids first: deterministic placement makes runs reproducible.
    for (let id = numBlocks - 1; id >= 0; id--) this.freeList.push(id);
  }

  /** Floats between consecutive heads of one block, and between consecutive blocks. */
  get headStride(): number {
    return this.blockSize * this.shape.headDim;
  }

  get blockStride(): number {
    return this.shape.numKvHeads * this.headStride;
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

  /** Bytes of one block in its stored form: per layer, its keys then its values, layer 0 first. */
  get blockBytes(): number {
    return 2 * this.shape.numLayers * this.blockStride * this.keys[0].BYTES_PER_ELEMENT;
  }

  /**
   * A copy of block `id`'s bytes (see blockBytes), for the durable block store. Asynchronous because a
   * runner that keeps the bytes on a device reads them back from there (it replaces this method).
   */
  async readBlock(id: number): Promise<Uint8Array> {
    const out = new Uint8Array(this.blockBytes);
    let at = 0;
    for (const part of this.blockParts(id)) {
      out.set(part, at);
      at += part.length;
    }
    return out;
  }

  /**
   * Zeroes token positions `tokens` .. blockSize - 1 of a block's bytes in readBlock's layout: a partial block
   * is stored without whatever an earlier owner of its pool block left past its tokens.
   */
  clearFrom(bytes: Uint8Array, tokens: number): void {
    const { numKvHeads, headDim } = this.shape;
    const element = this.keys[0].BYTES_PER_ELEMENT;
    const token = headDim * element;
    const part = this.blockStride * element;
    for (let at = 0; at < bytes.length; at += part)
      for (let h = 0; h < numKvHeads; h++)
        bytes.fill(0, at + (h * this.blockSize + tokens) * token, at + (h + 1) * this.blockSize * token);
  }

  /** Overwrites block `id` with bytes readBlock gave (a block restored from the store); a device runner replaces it. */
  writeBlock(id: number, bytes: Uint8Array): void {
    if (bytes.length !== this.blockBytes)
      throw new RangeError(`a KV block holds ${this.blockBytes} bytes, got ${bytes.length}`);
    let at = 0;
    for (const part of this.blockParts(id)) {
      part.set(bytes.subarray(at, at + part.length));
      at += part.length;
    }
  }

  /** Block `id`'s bytes in each layer's keys, then its values, layer 0 first: views, in the stored order. */
  private *blockParts(id: number): Generator<Uint8Array> {
    for (let layer = 0; layer < this.shape.numLayers; layer++) {
      for (const array of [this.keys[layer], this.values[layer]]) {
        const size = this.blockStride * array.BYTES_PER_ELEMENT;
        yield new Uint8Array(array.buffer, array.byteOffset + id * size, size);
      }
    }
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

  /** Evicts a cached block from the prefix cache's index (its bytes are free for reuse). */
  private uncache(id: number): void {
    this.byHash.delete(this.hashes[id]!);
    this.hashes[id] = undefined;
    this.evictions++;
  }

  /** Copies every layer's keys and values of block `from` into block `to`. */
  copyBlock(from: number, to: number): void {
    const n = this.blockStride;
    for (let layer = 0; layer < this.shape.numLayers; layer++) {
      this.keys[layer].copyWithin(to * n, from * n, from * n + n);
      this.values[layer].copyWithin(to * n, from * n, from * n + n);
    }
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

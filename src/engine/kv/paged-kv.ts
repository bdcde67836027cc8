import type { BlockPool } from './block-pool.js';
import type { KvTransfer } from './kv-memory.js';
import { blockHash, ROOT_HASH, saltedRoot, tailHash, variantRoot } from './block-hash.js';

/**
 * What a sequence's passes compute with besides the base weights (a LoRA adapter): the runner reads it per row,
 * and its identity joins the sequence's hash chain, so its blocks are shared only with the same weights.
 */
export interface WeightsVariant {
  readonly identity: string;
}

/**
 * Where matchPrefix finds blocks the pool has lost (the durable block store, read by BlockRestorer): full ones,
 * and sessions' partial last ones. The I/O, its checks and its counters are the source's; the manager only
 * places what it gives.
 */
export interface BlockSource {
  /** A block's stored bytes, of `tokens` tokens, ready for the pool; undefined when it is not stored or cannot be used. */
  read(hash: string, tokens: number): Uint8Array | undefined;
  /** Reads that failed (a storage error): after one, matchPrefix stops asking for this prompt. */
  readonly failures: number;
}

/**
 * One sequence's view of the block pool: its block table (token position p lives in block
 * blocks[floor(p / blockSize)] at offset p % blockSize). Created and resized only by KvCacheManager.
 */
export class PagedSequenceKv {
  length = 0;
  readonly blocks: number[] = [];
  /** Prefix hashes of this sequence's leading full blocks (blocks[i] is cached under hashes[i]). */
  readonly hashes: string[] = [];

  constructor(
    private readonly pool: BlockPool,
    /** The hash its chain starts from: ROOT_HASH, or a salted root (its blocks are shared only within the salt). */
    readonly root: string = ROOT_HASH,
    /** The weights its rows run with besides the base's (an adapter); undefined: the base alone. */
    readonly variant?: WeightsVariant,
  ) {}

  /** Marks `count` written tokens (in every layer) as stored. */
  advance(count: number): void {
    this.length += count;
  }

  /**
   * What a runner checks before it writes the next `count` positions (a kernel cannot throw): each position
   * has a block, and that block is this sequence's alone.
   */
  checkWritable(count: number): void {
    const bs = this.pool.blockSize;
    for (let pos = this.length; pos < this.length + count; pos += bs - (pos % bs)) {
      const block = this.blocks[Math.floor(pos / bs)];
      if (block === undefined) throw new Error(`no KV block reserved for position ${pos}`);
      if (!this.pool.isWritable(block))
        throw new Error(`KV block ${block} is shared or cached and must not be written`);
    }
  }
}

/**
 * Hands blocks to sequences and takes them back: prefix reuse, room for new tokens, copy-on-write forks.
 * Every method either succeeds entirely or changes nothing, so a failed reservation leaks nothing.
 * Bookkeeping only, as vLLM's KVCacheManager: the bytes a copy-on-write or a restore needs are planned here
 * (takeTransfers) and moved by the runner's KvMemory before the next pass reads them.
 */
export class KvCacheManager {
  copyOnWrites = 0;
  private source: BlockSource | undefined;
  /** Copies and restores planned since the last takeTransfers, in order. */
  private planned: KvTransfer[] = [];

  constructor(
    readonly pool: BlockPool,
    /** Salts every block hash: the model, and whatever else changes a block's bytes (see engine-load.ts). */
    readonly cacheIdentity: string,
  ) {}

  /**
   * The block copies and writes planned since the last call, in the order they must run: the caller has the
   * runner's KvMemory execute them (applyKvTransfers) before any pass reads those blocks.
   */
  takeTransfers(): KvTransfer[] {
    const out = this.planned;
    this.planned = [];
    return out;
  }

  /** Lets matchPrefix restore blocks from `source` where the pool's prefix cache ends. */
  restoreFrom(source: BlockSource): void {
    this.source = source;
  }

  get blockSize(): number {
    return this.pool.blockSize;
  }

  /**
   * A new, empty sequence; with `salt`, its blocks hash apart from every other salt's (saltedRoot), and with
   * `variant` (an adapter) apart from every other variant's and the base's (variantRoot).
   */
  create(salt?: string, variant?: WeightsVariant): PagedSequenceKv {
    const root = salt === undefined ? ROOT_HASH : saltedRoot(salt);
    return new PagedSequenceKv(this.pool, variant ? variantRoot(root, variant.identity) : root, variant);
  }

  /** Blocks a sequence of `tokens` tokens needs. */
  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.pool.blockSize);
  }

  /**
   * Attaches the longest run of cached full blocks that starts `tokens` to an empty sequence, and returns
   * how many tokens it covers: blocks from the pool's prefix cache, and past them, blocks restored from
   * the block source, if one is attached, then, for a turn of `session`, the longest partial block of that
   * session's that continues them (its previous turn's last block, cached or stored). The last token is never
   * taken from the cache: a pass must compute it to give logits.
   */
  matchPrefix(kv: PagedSequenceKv, tokens: readonly number[], session?: string): number {
    if (kv.length !== 0 || kv.blocks.length !== 0) throw new Error('matchPrefix needs an empty sequence');
    const bs = this.pool.blockSize;
    let parent = kv.root;
    for (let i = 0; (i + 1) * bs <= tokens.length - 1; i++) {
      const hash = blockHash(parent, tokens.slice(i * bs, (i + 1) * bs), this.cacheIdentity);
      const cached = this.pool.lookup(hash);
      if (cached !== undefined) this.pool.retain(cached);
      const block = cached ?? this.restore(hash, this.blocksFor(tokens.length - (i + 1) * bs), bs);
      if (block === undefined) break;
      kv.blocks.push(block);
      kv.hashes.push(hash);
      parent = hash;
    }
    kv.length = kv.blocks.length * bs;
    if (this.source && session !== undefined) this.matchTail(kv, tokens, parent, session);
    return kv.length;
  }

  /**
   * The longest partial block (1 .. blockSize - 1 tokens) of `session`'s that continues `kv`'s full blocks
   * with `tokens`: from the prefix cache (where an earlier restore left it) or the store. It is cached, so the
   * sequence's first write copies it (reserve), and a request that waits and comes back finds it in the pool.
   */
  private matchTail(kv: PagedSequenceKv, tokens: readonly number[], parent: string, session: string): void {
    const from = kv.length;
    // Room for it, its copy, and the blocks the prompt needs past it.
    const after = this.blocksFor(tokens.length - from);
    if (this.pool.available <= after) return;
    const failed = this.source?.failures;
    for (let n = Math.min(this.pool.blockSize - 1, tokens.length - 1 - from); n >= 1; n--) {
      const hash = tailHash(parent, tokens.slice(from, from + n), this.cacheIdentity, session);
      const cached = this.pool.lookup(hash);
      if (cached !== undefined) this.pool.retain(cached);
      const block = cached ?? this.restore(hash, after, n);
      if (block !== undefined) {
        kv.blocks.push(block);
        kv.length += n;
        return;
      }
      if (this.source?.failures !== failed) return; // the store failed: one miss is enough
    }
  }

  /**
   * A session's partial last block as the store names it, for BlockPersistence to write once the turn is
   * over; undefined when `kv` ends on a block boundary (or its full blocks are not all in the prefix cache).
   */
  tailOf(kv: PagedSequenceKv, tokens: readonly number[], session: string): { hash: string; block: number } | undefined {
    const bs = this.pool.blockSize;
    const full = kv.hashes.length;
    const n = kv.length - full * bs;
    if (n <= 0 || n >= bs || kv.blocks.length <= full) return undefined;
    const parent = kv.hashes[full - 1] ?? kv.root;
    const hash = tailHash(parent, tokens.slice(full * bs, kv.length), this.cacheIdentity, session);
    return { hash, block: kv.blocks[full] };
  }

  /**
   * A pool block holding `hash`'s stored bytes (`tokens` of them), cached under it and held once; undefined
   * if it is not stored, cannot be read, or there is no room. Room means a block beyond the `after` blocks the
   * rest of the prompt needs: restoring what the request then could not start with would only evict others' prefixes.
   */
  private restore(hash: string, after: number, tokens: number): number | undefined {
    if (!this.source || this.pool.available <= after) return undefined;
    const bytes = this.source.read(hash, tokens);
    if (!bytes) return undefined;
    const block = this.pool.allocate()!;
    this.planned.push({ kind: 'write', block, bytes });
    this.pool.cache(block, hash);
    return block;
  }

  /**
   * Makes room to write `count` more tokens: new blocks as needed, and a private copy of a shared last
   * partial block. Returns false, changing nothing, when the pool cannot supply the blocks; with
   * `spareOnly`, also when supplying them would evict cached prefixes (room that is merely nice to have).
   */
  reserve(kv: PagedSequenceKv, count: number, spareOnly = false): boolean {
    const bs = this.pool.blockSize;
    const fresh = Math.max(0, this.blocksFor(kv.length + count) - kv.blocks.length);
    const lastIndex = Math.floor(kv.length / bs);
    const copy = kv.length % bs !== 0 && count > 0 && !this.pool.isWritable(kv.blocks[lastIndex]) ? 1 : 0;
    if (fresh + copy > (spareOnly ? this.pool.unused : this.pool.available)) return false;
    if (copy) {
      const shared = kv.blocks[lastIndex];
      const own = this.pool.allocate()!;
      this.planned.push({ kind: 'copy', from: shared, to: own });
      this.pool.release(shared);
      kv.blocks[lastIndex] = own;
      this.copyOnWrites++;
    }
    for (let i = 0; i < fresh; i++) kv.blocks.push(this.pool.allocate()!);
    return true;
  }

  /** Registers the blocks a pass filled in the prefix cache; `tokens` are the sequence's tokens so far. */
  commit(kv: PagedSequenceKv, tokens: readonly number[]): void {
    const bs = this.pool.blockSize;
    const full = Math.floor(Math.min(kv.length, tokens.length) / bs);
    for (let i = kv.hashes.length; i < full; i++) {
      const hash = blockHash(kv.hashes[i - 1] ?? kv.root, tokens.slice(i * bs, (i + 1) * bs), this.cacheIdentity);
      this.pool.cache(kv.blocks[i], hash);
      kv.hashes.push(hash);
    }
  }

  /** A second sequence sharing every block of `kv`; the first write into a shared partial block copies it. */
  fork(kv: PagedSequenceKv): PagedSequenceKv {
    const child = new PagedSequenceKv(this.pool, kv.root, kv.variant);
    for (const block of kv.blocks) this.pool.retain(block);
    child.blocks.push(...kv.blocks);
    child.hashes.push(...kv.hashes);
    child.length = kv.length;
    return child;
  }

  /**
   * Forgets every position from `length` on (rejected speculative tokens): blocks past the new end go
   * back to the pool, and a kept partial block is rewritten in place by the next pass (reserve copies it
   * first if it is shared or cached).
   */
  truncate(kv: PagedSequenceKv, length: number): void {
    if (!Number.isInteger(length) || length < 0 || length > kv.length)
      throw new RangeError(`cannot truncate ${kv.length} positions to ${length}`);
    const keep = this.blocksFor(length);
    for (let i = kv.blocks.length - 1; i >= keep; i--) this.pool.release(kv.blocks[i]);
    kv.blocks.length = Math.min(kv.blocks.length, keep);
    kv.hashes.length = Math.min(kv.hashes.length, Math.floor(length / this.pool.blockSize));
    kv.length = length;
  }

  /** Gives every block back; the tail first, so that a prefix's blocks stay cached longest. */
  free(kv: PagedSequenceKv): void {
    for (let i = kv.blocks.length - 1; i >= 0; i--) this.pool.release(kv.blocks[i]);
    kv.blocks.length = 0;
    kv.hashes.length = 0;
    kv.length = 0;
  }
}

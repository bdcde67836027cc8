import type { BlockPool } from './block-pool.js';
import { blockHash, ROOT_HASH } from './block-hash.js';
import type { SequenceKv } from './sequence-kv.js';

/**
 * One sequence's view of the block pool: its block table (token position p lives in block
 * blocks[floor(p / blockSize)] at offset p % blockSize). Created and resized only by KvCacheManager.
 */
export class PagedSequenceKv implements SequenceKv {
  length = 0;
  readonly blocks: number[] = [];
  /** Prefix hashes of this sequence's leading full blocks (blocks[i] is cached under hashes[i]). */
  readonly hashes: string[] = [];

  constructor(private readonly pool: BlockPool) {}

  gather(layer: number, keys: Float32Array, values: Float32Array, slots: number, slotOffset: number): void {
    const { blockSize, headStride, blockStride } = this.pool;
    const { numKvHeads, headDim } = this.pool.shape;
    const poolKeys = this.pool.keys[layer];
    const poolValues = this.pool.values[layer];
    for (let i = 0; i * blockSize < this.length; i++) {
      const n = Math.min(blockSize, this.length - i * blockSize) * headDim;
      for (let h = 0; h < numKvHeads; h++) {
        const src = this.blocks[i] * blockStride + h * headStride;
        const dst = (h * slots + slotOffset + i * blockSize) * headDim;
        keys.set(poolKeys.subarray(src, src + n), dst);
        values.set(poolValues.subarray(src, src + n), dst);
      }
    }
  }

  scatter(layer: number, keys: Float32Array, values: Float32Array, slots: number, slotOffset: number, count: number): void {
    const { blockSize, headStride, blockStride } = this.pool;
    const { numKvHeads, headDim } = this.pool.shape;
    const poolKeys = this.pool.keys[layer];
    const poolValues = this.pool.values[layer];
    for (let done = 0; done < count; ) {
      const pos = this.length + done;
      const block = this.blocks[Math.floor(pos / blockSize)];
      if (block === undefined) throw new Error(`no KV block reserved for position ${pos}`);
      if (!this.pool.isWritable(block)) throw new Error(`KV block ${block} is shared or cached and must not be written`);
      const offset = pos % blockSize;
      const n = Math.min(blockSize - offset, count - done);
      for (let h = 0; h < numKvHeads; h++) {
        const src = (h * slots + slotOffset + done) * headDim;
        const dst = block * blockStride + h * headStride + offset * headDim;
        poolKeys.set(keys.subarray(src, src + n * headDim), dst);
        poolValues.set(values.subarray(src, src + n * headDim), dst);
      }
      done += n;
    }
  }

  advance(count: number): void {
    this.length += count;
  }

  /**
   * The checks scatter makes, for runners whose kernels write the next `count` positions in place (a
   * kernel cannot throw): each position has a block, and that block is this sequence's alone.
   */
  checkWritable(count: number): void {
    const bs = this.pool.blockSize;
    for (let pos = this.length; pos < this.length + count; pos += bs - (pos % bs)) {
      const block = this.blocks[Math.floor(pos / bs)];
      if (block === undefined) throw new Error(`no KV block reserved for position ${pos}`);
      if (!this.pool.isWritable(block)) throw new Error(`KV block ${block} is shared or cached and must not be written`);
    }
  }
}

/**
 * Hands blocks to sequences and takes them back: prefix reuse, room for new tokens, copy-on-write forks.
 * Every method either succeeds entirely or changes nothing, so a failed reservation leaks nothing.
 */
export class KvCacheManager {
  copyOnWrites = 0;

  constructor(
    readonly pool: BlockPool,
    private readonly modelId: string,
  ) {}

  get blockSize(): number {
    return this.pool.blockSize;
  }

  /** A new, empty sequence. */
  create(): PagedSequenceKv {
    return new PagedSequenceKv(this.pool);
  }

  /** Blocks a sequence of `tokens` tokens needs. */
  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.pool.blockSize);
  }

  /**
   * Attaches the longest run of cached full blocks that starts `tokens` to an empty sequence, and returns
   * how many tokens it covers. The last token is never taken from the cache: a pass must compute it to
   * give logits.
   */
  matchPrefix(kv: PagedSequenceKv, tokens: readonly number[]): number {
    if (kv.length !== 0 || kv.blocks.length !== 0) throw new Error('matchPrefix needs an empty sequence');
    const bs = this.pool.blockSize;
    let parent = ROOT_HASH;
    for (let i = 0; (i + 1) * bs <= tokens.length - 1; i++) {
      const hash = blockHash(parent, tokens.slice(i * bs, (i + 1) * bs), this.modelId);
      const block = this.pool.lookup(hash);
      if (block === undefined) break;
      this.pool.retain(block);
      kv.blocks.push(block);
      kv.hashes.push(hash);
      parent = hash;
    }
    kv.length = kv.blocks.length * bs;
    return kv.length;
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
      this.pool.copyBlock(shared, own);
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
      const hash = blockHash(kv.hashes[i - 1] ?? ROOT_HASH, tokens.slice(i * bs, (i + 1) * bs), this.modelId);
      this.pool.cache(kv.blocks[i], hash);
      kv.hashes.push(hash);
    }
  }

  /** A second sequence sharing every block of `kv`; the first write into a shared partial block copies it. */
  fork(kv: PagedSequenceKv): PagedSequenceKv {
    const child = new PagedSequenceKv(this.pool);
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
    if (!Number.isInteger(length) || length < 0 || length > kv.length) throw new RangeError(`cannot truncate ${kv.length} positions to ${length}`);
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

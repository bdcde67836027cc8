/**
 * Part of every cache identity. Bump it whenever a change to the kernels, a runner or the pool's layout
 * changes the bytes of a block computed from the same weights: stored blocks of the old code are then
 * dropped instead of restored.
 */
export const KV_FORMAT_VERSION = 'kv-2';

export interface StoredBlock {
  hash: string;
  /** The hash of the block before it ('' for a prompt's first block). */
  parent: string;
  bytes: Uint8Array;
}

/**
 * Durable storage for KV blocks (full ones, and a session turn's partial last one), so a cache outlives the
 * engine that computed it (an evicted or restarted Durable Object restores a session's history instead of
 * prefilling it again).
 *
 * A full block is immutable and named by its chained prefix hash, which is salted with the cache
 * identity (model, weights digest, dtype, KV dtype, block size, runner): equal names mean equal bytes,
 * so a block is stored once however many sessions and requests share it. Bytes are opaque here: the
 * pool's own layout (KvMemory.readBlock), fp32 or fp16 as the pool holds them.
 *
 * Reads are synchronous because restoring happens while the scheduler admits a request (the object's
 * SQLite is synchronous); writes happen after a generation has sent its last event, never on the token path.
 */
export interface KvBlockStore {
  /**
   * Binds the store to one cache identity before first use. Blocks stored under any other identity
   * (another model, other weights, another KV dtype) can never be restored again and are dropped.
   */
  open(identity: string, tokensPerBlock: number): void;
  has(hash: string): boolean;
  /**
   * The block's bytes, or undefined when it is absent or fails its checksum; a bad block is deleted, so
   * the caller falls back to prefill (a slower answer, never a wrong one).
   */
  read(hash: string): Uint8Array | undefined;
  /**
   * Stores one block, bytes and index together or not at all; may evict others to stay in budget.
   * False when it was not stored (already there, or larger than the whole budget).
   */
  write(block: StoredBlock): boolean;
  /**
   * Marks a chain (root first) as just used, its tip older than its root. Eviction takes least recently
   * used leaves (blocks no stored block names as parent), so a chain goes from its tip and a stored
   * block never loses its parent to eviction.
   */
  touch(chain: readonly string[]): void;
  /**
   * The chain a session needs now, replacing what it needed before: pinned blocks are evicted last. A
   * partial last block (block-hash.ts tailHash) the session pinned before and no longer does is deleted,
   * unless another session pins it: it continued a turn that the new chain has gone past.
   */
  pin(owner: string, chain: readonly string[]): void;
  /** Forgets a session (deleted): the blocks only it pinned are deleted. */
  unpin(owner: string): void;
  /** Tokens of a session's pinned chain that could be restored now: the tokens of its blocks up to the first one missing. */
  storedTokens(owner: string): number;
  usage(): KvStoreUsage;
}

export interface KvStoreUsage {
  blocks: number;
  bytes: number;
  budgetBytes: number;
  /** Blocks dropped because their bytes failed the checks on a read (torn or damaged). */
  discarded: number;
}

/**
 * A 64-bit checksum of a block's bytes (two FNV-1a lanes over 32-bit words, and the length), checked on
 * every restore. It guards against torn or damaged rows, not against an adversary: blocks are named by
 * SHA-256 and only the engine writes them.
 */
export function blockChecksum(bytes: Uint8Array): string {
  const words =
    bytes.byteOffset % 4 === 0
      ? new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length >>> 2)
      : new Uint32Array(bytes.slice(0, bytes.length & ~3).buffer);
  let a = 0x811c9dc5 ^ bytes.length;
  let b = 0x01000193 ^ Math.imul(bytes.length, 0x9e3779b1);
  for (let i = 0; i < words.length; i++) {
    const w = words[i];
    a = Math.imul(a ^ w, 0x01000193);
    b = Math.imul(b ^ ((w >>> 16) | (w << 16)), 0x01000193) ^ (a >>> 15);
  }
  for (let i = words.length * 4; i < bytes.length; i++) a = Math.imul(a ^ bytes[i], 0x01000193);
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
}

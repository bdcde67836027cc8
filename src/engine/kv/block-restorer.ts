import type { KvBlockStore } from './block-store.js';
import type { BlockSource } from './paged-kv.js';

/** Blocks restored from the durable store over the engine's life. */
export interface RestoreCounters {
  blocks: number;
  tokens: number;
  ms: number;
  /** Restores that found a block the pool could not take (wrong size for this pool). */
  rejected: number;
  /** Restores the store failed (a storage error): treated as a miss, the rest is prefilled. */
  failed: number;
}

/**
 * The durable store's side of a restore: the read, its size check and its counters. The cache manager asks
 * for a hash where its prefix cache ends and, given bytes, places them in a pool block (a planned write).
 */
export class BlockRestorer implements BlockSource {
  readonly counters: RestoreCounters = { blocks: 0, tokens: 0, ms: 0, rejected: 0, failed: 0 };

  constructor(
    private readonly store: KvBlockStore,
    /** Bytes of one block of the pool that takes them: a stored block of another size is not used. */
    private readonly blockBytes: number,
  ) {}

  get failures(): number {
    return this.counters.failed;
  }

  read(hash: string, tokens: number): Uint8Array | undefined {
    const t0 = performance.now();
    try {
      const bytes = this.store.read(hash);
      if (!bytes) return undefined;
      if (bytes.length !== this.blockBytes) {
        this.counters.rejected++;
        return undefined;
      }
      this.counters.blocks++;
      this.counters.tokens += tokens;
      return bytes;
    } catch (err) {
      // A slower answer, never a failed one: the rest of the prompt is prefilled.
      this.counters.failed++;
      console.warn(`KV block store: restoring a block failed: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    } finally {
      this.counters.ms += performance.now() - t0;
    }
  }
}

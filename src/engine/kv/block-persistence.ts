import type { BlockPool } from './block-pool.js';
import { clearTokensFrom, type KvMemory } from './kv-memory.js';
import { blockTokens, ROOT_HASH } from './block-hash.js';
import type { KvBlockStore } from './block-store.js';
import { yieldToEventLoop } from '../event-loop.js';

/** A retired sequence's full blocks (root first). */
interface QueuedChain {
  chain: string[];
  /** A session turn's partial last block, held in the pool until it is written or dropped. */
  tail: { hash: string; block: number } | undefined;
  /** The session the sequence was a turn of: deleting the session drops the chain. */
  session: string | undefined;
  /** Pin the chain to its session (a finished turn, whose cache the session keeps). */
  pin: boolean;
  /** Set when its session is deleted while it is being written: the write stops there. */
  cancelled: boolean;
}

/** What the writer has done over its life. */
export interface PersistCounters {
  /** Blocks written, and their bytes (a block already stored is only touched). */
  storedBlocks: number;
  storedBytes: number;
  writeMs: number;
  /** Chains whose write failed (storage refused it); their blocks are recomputed if ever needed. */
  failedChains: number;
  /** Chains queued or being written now. */
  pendingChains: number;
}

/** Bytes written between yields, so that writing a long chain never holds the engine loop for long. */
const SLICE_BYTES = 2 ** 20;
/** Chains kept for a host that flushes rarely (or never): past this, the oldest are dropped unwritten. */
const MAX_QUEUED = 1024;
/** Partial blocks held for the writer, the one being written included: past this, the oldest queued ones are let go unwritten (pool room first). */
const MAX_TAILS = 8;

/**
 * Writes retired sequences' full blocks to the durable store, after the fact: the engine queues a chain
 * when a sequence retires, and the host calls flush() once the generation's last event is out. A block is
 * read from the pool at write time, if the pool still has it (cached blocks are immutable; one the pool
 * has lost cannot be stored, and nothing past it in its chain could be restored either). A session turn's
 * partial last block is not cached, so the queue holds it (a reference) until it is written: the session's
 * next turn, if it comes first, writes into a copy.
 */
export class BlockPersistence {
  private readonly counts = { storedBlocks: 0, storedBytes: 0, writeMs: 0, failedChains: 0 };
  private readonly queue: QueuedChain[] = [];
  private current: QueuedChain | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly pool: BlockPool,
    private readonly memory: KvMemory,
    readonly store: KvBlockStore,
  ) {}

  get counters(): PersistCounters {
    return { ...this.counts, pendingChains: this.queue.length + (this.current ? 1 : 0) };
  }

  /**
   * Queues a retired sequence's chain; `pin`: the session keeps this cache (a finished turn); `tail`: its
   * partial last block (KvCacheManager.tailOf), written after the chain.
   */
  enqueue(
    chain: readonly string[],
    session: string | undefined,
    pin: boolean,
    tail?: { hash: string; block: number },
  ): void {
    if (chain.length === 0 && !tail) return;
    if (tail) this.pool.retain(tail.block);
    this.queue.push({ chain: [...chain], tail, session, pin: pin && session !== undefined, cancelled: false });
    if (this.queue.length > MAX_QUEUED) this.done(this.queue.shift()!);
    // The entry being written holds one too.
    const holding = this.queue.filter((e) => e.tail);
    const allowed = MAX_TAILS - (this.current?.tail ? 1 : 0);
    for (const entry of holding.slice(0, Math.max(0, holding.length - allowed))) this.done(entry);
  }

  /** A deleted session: none of its chains is written (one being written stops), so nothing of it is left behind. */
  forget(session: string): void {
    for (let i = this.queue.length - 1; i >= 0; i--)
      if (this.queue[i].session === session) this.done(this.queue.splice(i, 1)[0]);
    if (this.current?.session === session) this.current.cancelled = true;
  }

  /** The runner's KV memory lost its contents: nothing queued may be read from it (it would store garbage). */
  dropAll(): void {
    for (const entry of this.queue.splice(0)) this.done(entry);
    if (this.current) this.current.cancelled = true;
  }

  /** Lets go of an entry written or dropped: its tail block goes back to the pool. */
  private done(entry: QueuedChain): void {
    if (entry.tail) this.pool.release(entry.tail.block);
    entry.tail = undefined;
  }

  /** Writes everything queued; resolves when the queue is empty. One writer at a time. */
  flush(): Promise<void> {
    this.running ??= this.drain().finally(() => (this.running = undefined));
    return this.running;
  }

  private async drain(): Promise<void> {
    this.current = this.queue.shift();
    while (this.current) {
      const entry = this.current;
      try {
        await this.write(entry);
      } catch (err) {
        this.counts.failedChains++;
        console.warn(
          `KV block store: a chain of ${entry.chain.length} blocks was not stored: ${err instanceof Error ? err.message : String(err)}`,
        );
      } finally {
        this.done(entry);
      }
      this.current = this.queue.shift();
    }
  }

  private async write(entry: QueuedChain): Promise<void> {
    // A chain longer than the whole budget would evict its own root to store its tip (and has no use for a tail).
    const room = Math.floor(this.store.usage().budgetBytes / this.memory.blockBytes);
    let chain = entry.chain.slice(0, room);
    const tail = entry.chain.length < room ? entry.tail : undefined;
    // Pinned, and its stored prefix touched, first: making room for its new blocks then never evicts its own.
    if (entry.pin) this.store.pin(entry.session!, tail ? [...chain, tail.hash] : chain);
    this.store.touch(chain);
    let slice = 0;
    for (let i = 0; i < chain.length; i++) {
      const hash = chain[i];
      if (this.store.has(hash)) continue;
      const block = this.pool.lookup(hash);
      if (block === undefined) {
        chain = chain.slice(0, i);
        break;
      }
      const t0 = performance.now();
      // Held while it is read: a device read spans awaits, and an idle block could be handed out meanwhile.
      this.pool.retain(block);
      let bytes: Uint8Array;
      try {
        bytes = await this.memory.readBlock(block);
      } finally {
        this.pool.release(block);
      }
      if (entry.cancelled) return;
      if (this.store.write({ hash, parent: chain[i - 1] ?? ROOT_HASH, bytes })) {
        this.counts.storedBlocks++;
        this.counts.storedBytes += bytes.length;
      }
      this.counts.writeMs += performance.now() - t0;
      slice += bytes.length;
      if (slice >= SLICE_BYTES) {
        slice = 0;
        await yieldToEventLoop();
        if (entry.cancelled) return;
      }
    }
    // The tail only follows a whole chain: a restore reaches it through every block before it.
    if (tail && chain.length === entry.chain.length && !this.store.has(tail.hash)) {
      const t0 = performance.now();
      const bytes = await this.memory.readBlock(tail.block);
      if (entry.cancelled) return;
      clearTokensFrom(bytes, this.pool.shape, this.pool.blockSize, blockTokens(tail.hash, this.pool.blockSize));
      if (this.store.write({ hash: tail.hash, parent: chain.at(-1) ?? ROOT_HASH, bytes })) {
        this.counts.storedBlocks++;
        this.counts.storedBytes += bytes.length;
      }
      this.counts.writeMs += performance.now() - t0;
    }
    this.store.touch(tail ? [...chain, tail.hash] : chain);
  }
}

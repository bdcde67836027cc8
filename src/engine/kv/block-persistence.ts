import type { BlockPool } from './block-pool.js';
import { ROOT_HASH } from './block-hash.js';
import type { KvBlockStore } from './block-store.js';
import { yieldToEventLoop } from '../event-loop.js';

/** A finished sequence's full blocks (root first), and the session that needs them, if any. */
interface QueuedChain {
  chain: string[];
  owner: string | undefined;
}

/** What the writer has done over its life. */
export interface PersistCounters {
  /** Blocks written, and their bytes (a block already stored is only touched). */
  storedBlocks: number;
  storedBytes: number;
  writeMs: number;
  /** Chains whose write failed (storage refused it); their blocks are recomputed if ever needed. */
  failedChains: number;
}

/** Blocks written between yields, so a long chain never holds the engine loop for long. */
const BLOCKS_PER_SLICE = 8;
/** Chains kept for a host that flushes rarely (or never): past this, the oldest are dropped unwritten. */
const MAX_QUEUED = 1024;

/**
 * Writes finished sequences' full blocks to the durable store, after the fact: the engine queues a
 * chain when a sequence retires, and the host calls flush() once the generation's last event is out.
 * A block is read from the pool at write time, if the pool still has it (cached blocks are immutable,
 * and one the pool has lost cannot be stored: nothing past it in its chain can then be restored either).
 */
export class BlockPersistence {
  readonly counters: PersistCounters = { storedBlocks: 0, storedBytes: 0, writeMs: 0, failedChains: 0 };
  private readonly queue: QueuedChain[] = [];
  private current: QueuedChain | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly pool: BlockPool,
    readonly store: KvBlockStore,
  ) {}

  enqueue(chain: readonly string[], owner?: string): void {
    if (chain.length > 0 || owner !== undefined) this.queue.push({ chain: [...chain], owner });
    if (this.queue.length > MAX_QUEUED) this.queue.shift();
  }

  /** A deleted session: its chains are not written (one being written stops), so nothing of it is left behind. */
  forget(owner: string): void {
    for (let i = this.queue.length - 1; i >= 0; i--) if (this.queue[i].owner === owner) this.queue.splice(i, 1);
    if (this.current?.owner === owner) this.current.owner = undefined;
  }

  get pending(): number {
    return this.queue.length;
  }

  /** Writes everything queued; resolves when the queue is empty. One writer at a time. */
  flush(): Promise<void> {
    this.running ??= this.drain().finally(() => (this.running = undefined));
    return this.running;
  }

  private async drain(): Promise<void> {
    while ((this.current = this.queue.shift())) {
      try {
        await this.write(this.current);
      } catch (err) {
        this.counters.failedChains++;
        console.warn(`KV block store: a chain of ${this.current.chain.length} blocks was not stored: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  private async write(entry: QueuedChain): Promise<void> {
    let chain = entry.chain;
    // Pinned first, so that making room for the chain's own new blocks never evicts them.
    if (entry.owner !== undefined) this.store.pin(entry.owner, chain);
    const owner = entry.owner;
    let slice = 0;
    for (let i = 0; i < chain.length; i++) {
      // Its session was deleted meanwhile (and unpinned): what it alone would have held is not written.
      if (owner !== undefined && entry.owner === undefined) return;
      const hash = chain[i];
      if (this.store.has(hash)) continue;
      const block = this.pool.lookup(hash);
      if (block === undefined) {
        chain = chain.slice(0, i);
        break;
      }
      const t0 = performance.now();
      const bytes = await this.pool.readBlock(block);
      this.store.write({ hash, parent: chain[i - 1] ?? ROOT_HASH, bytes });
      this.counters.storedBlocks++;
      this.counters.storedBytes += bytes.length;
      this.counters.writeMs += performance.now() - t0;
      if (++slice % BLOCKS_PER_SLICE === 0) await yieldToEventLoop();
    }
    this.store.touch(chain);
  }
}

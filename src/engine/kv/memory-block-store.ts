import { blockTokens, isTail } from './block-hash.js';
import { blockChecksum, type KvBlockStore, type KvStoreUsage, type StoredBlock } from './block-store.js';

interface Entry {
  parent: string;
  bytes: Uint8Array;
  checksum: string;
  lastUsed: number;
}

/**
 * A KvBlockStore in this process's memory: for engines in Node (tests, the bench) that want the same
 * restore path a Durable Object takes over its SQLite, with the same budget and eviction order.
 */
export class MemoryKvBlockStore implements KvBlockStore {
  private readonly blocks = new Map<string, Entry>();
  private readonly pins = new Map<string, string[]>();
  private tokensPerBlock = 0;
  private identity: string | undefined;
  private clock = 0;
  private bytes = 0;
  private discarded = 0;

  constructor(readonly budgetBytes: number) {}

  open(identity: string, tokensPerBlock: number): void {
    this.tokensPerBlock = tokensPerBlock;
    if (this.identity !== undefined && this.identity !== identity) {
      this.blocks.clear();
      this.pins.clear();
      this.bytes = 0;
    }
    this.identity = identity;
  }

  has(hash: string): boolean {
    return this.blocks.has(hash);
  }

  read(hash: string): Uint8Array | undefined {
    const entry = this.blocks.get(hash);
    if (!entry) return undefined;
    if (blockChecksum(entry.bytes) === entry.checksum) return entry.bytes;
    this.discarded++;
    this.delete(hash);
    return undefined;
  }

  write({ hash, parent, bytes }: StoredBlock): boolean {
    if (this.blocks.has(hash) || bytes.length > this.budgetBytes) return false;
    while (this.bytes + bytes.length > this.budgetBytes) this.evictOne();
    this.blocks.set(hash, { parent, bytes: bytes.slice(), checksum: blockChecksum(bytes), lastUsed: ++this.clock });
    this.bytes += bytes.length;
    return true;
  }

  touch(chain: readonly string[]): void {
    for (let i = chain.length - 1; i >= 0; i--) {
      const entry = this.blocks.get(chain[i]);
      if (entry) entry.lastUsed = ++this.clock;
    }
  }

  pin(owner: string, chain: readonly string[]): void {
    const before = this.pins.get(owner) ?? [];
    this.pins.set(owner, [...chain]);
    for (const hash of before) if (isTail(hash) && !chain.includes(hash) && !this.pinned(hash)) this.delete(hash);
  }

  unpin(owner: string): void {
    const mine = this.pins.get(owner);
    this.pins.delete(owner);
    for (const hash of mine ?? []) if (!this.pinned(hash)) this.delete(hash);
  }

  storedTokens(owner: string): number {
    let tokens = 0;
    for (const hash of this.pins.get(owner) ?? []) {
      if (!this.blocks.has(hash)) break;
      tokens += blockTokens(hash, this.tokensPerBlock);
    }
    return tokens;
  }

  usage(): KvStoreUsage {
    return { blocks: this.blocks.size, bytes: this.bytes, budgetBytes: this.budgetBytes, discarded: this.discarded };
  }

  /** Damages a stored block's bytes in place (tests of the checksum path). */
  corrupt(hash: string): void {
    const entry = this.blocks.get(hash);
    if (entry) entry.bytes[entry.bytes.length >> 1] ^= 0x40;
  }

  private pinned(hash: string): boolean {
    for (const chain of this.pins.values()) if (chain.includes(hash)) return true;
    return false;
  }

  /** The least recently used leaf (no stored block's parent); a block some session's chain needs only when no other is left. */
  private evictOne(): void {
    const parents = new Set([...this.blocks.values()].map((e) => e.parent));
    const needed = new Set([...this.pins.values()].flat());
    let victim: [string, number, boolean] | undefined;
    for (const [hash, entry] of this.blocks) {
      if (parents.has(hash)) continue;
      const pinned = needed.has(hash);
      if (!victim || (victim[2] && !pinned) || (victim[2] === pinned && entry.lastUsed < victim[1]))
        victim = [hash, entry.lastUsed, pinned];
    }
    if (victim) this.delete(victim[0]);
  }

  private delete(hash: string): void {
    const entry = this.blocks.get(hash);
    if (!entry) return;
    this.blocks.delete(hash);
    this.bytes -= entry.bytes.length;
  }
}

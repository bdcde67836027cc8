/// <reference types="@cloudflare/workers-types" />
import { blockTokens } from '../engine/kv/block-hash.js';
import { blockChecksum, type KvBlockStore, type KvStoreUsage, type StoredBlock } from '../engine/kv/block-store.js';

/** Bytes per stored part: a Durable Object's SQLite row holds at most 2 MB, and a block may be larger. */
const PART_BYTES = 2 ** 20;

/** Runs `fn` as one SQLite transaction: all of its writes, or (if it throws) none. */
export type Transaction = <T>(fn: () => T) => T;

interface BlockRow extends Record<string, SqlStorageValue> {
  size: number;
  checksum: string;
  parts: number;
}

/**
 * The engine's KV blocks in the object's SQLite, so a session's cache outlives the object: opaque bytes
 * named by their prefix hash (the engine's business), split into parts of at most 1 MiB, each block
 * written with its index row in one transaction and checked against its checksum on every read.
 * Least recently used blocks are evicted to stay within `budgetBytes`; blocks a session's chain needs
 * (pinned) go only when nothing else is left.
 */
export class SqlKvBlockStore implements KvBlockStore {
  private blocks = 0;
  private bytes = 0;
  private clock = 0;
  private tokensPerBlock = 0;
  /** Blocks dropped because their bytes failed the checks (torn or damaged rows). */
  private discarded = 0;

  constructor(
    private readonly sql: SqlStorage,
    private readonly transaction: Transaction,
    readonly budgetBytes: number,
  ) {
    sql.exec(`CREATE TABLE IF NOT EXISTS kv_blocks (
      hash TEXT PRIMARY KEY,
      parent TEXT NOT NULL,
      size INTEGER NOT NULL,
      checksum TEXT NOT NULL,
      parts INTEGER NOT NULL,
      last_used INTEGER NOT NULL
    )`);
    sql.exec('CREATE INDEX IF NOT EXISTS kv_blocks_last_used ON kv_blocks (last_used)');
    sql.exec('CREATE INDEX IF NOT EXISTS kv_blocks_parent ON kv_blocks (parent)');
    sql.exec(
      'CREATE TABLE IF NOT EXISTS kv_block_parts (hash TEXT NOT NULL, part INTEGER NOT NULL, bytes BLOB NOT NULL, PRIMARY KEY (hash, part))',
    );
    // A session's chain, block by block (position 0 first): what it needs to be restored.
    sql.exec(
      'CREATE TABLE IF NOT EXISTS kv_pins (owner TEXT NOT NULL, position INTEGER NOT NULL, hash TEXT NOT NULL, PRIMARY KEY (owner, position))',
    );
    sql.exec('CREATE INDEX IF NOT EXISTS kv_pins_hash ON kv_pins (hash)');
    sql.exec('CREATE TABLE IF NOT EXISTS kv_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)');
    // What the blocks were written with, so a session's stored tokens are known before the engine loads.
    this.tokensPerBlock = Number(this.meta('tokens_per_block') ?? 0);
    this.recount();
  }

  open(identity: string, tokensPerBlock: number): void {
    this.tokensPerBlock = tokensPerBlock;
    if (this.meta('identity') === identity) return;
    this.atomically(() => {
      this.sql.exec('DELETE FROM kv_block_parts');
      this.sql.exec('DELETE FROM kv_blocks');
      this.sql.exec('DELETE FROM kv_pins');
      this.sql.exec(
        "INSERT OR REPLACE INTO kv_meta (key, value) VALUES ('identity', ?), ('tokens_per_block', ?)",
        identity,
        String(tokensPerBlock),
      );
    });
    this.recount();
  }

  private meta(key: string): string | undefined {
    return this.sql.exec<{ value: string }>('SELECT value FROM kv_meta WHERE key = ?', key).toArray()[0]?.value;
  }

  has(hash: string): boolean {
    return this.sql.exec('SELECT 1 FROM kv_blocks WHERE hash = ?', hash).toArray().length > 0;
  }

  read(hash: string): Uint8Array | undefined {
    const row = this.sql
      .exec<BlockRow>('SELECT size, checksum, parts FROM kv_blocks WHERE hash = ?', hash)
      .toArray()[0];
    if (!row) return undefined;
    const parts = this.sql
      .exec<{ part: number; bytes: ArrayBuffer }>(
        'SELECT part, bytes FROM kv_block_parts WHERE hash = ? ORDER BY part',
        hash,
      )
      .toArray();
    const bytes = new Uint8Array(row.size);
    let at = 0;
    const whole =
      parts.length === row.parts &&
      parts.every((p, i) => {
        const part = new Uint8Array(p.bytes);
        if (p.part !== i || at + part.length > row.size) return false;
        bytes.set(part, at);
        at += part.length;
        return true;
      }) &&
      at === row.size;
    if (whole && blockChecksum(bytes) === row.checksum) return bytes;
    this.discarded++;
    this.atomically(() => this.delete(hash));
    return undefined;
  }

  write({ hash, parent, bytes }: StoredBlock): boolean {
    if (bytes.length > this.budgetBytes || this.has(hash)) return false;
    this.makeRoom(bytes.length);
    const parts = Math.max(1, Math.ceil(bytes.length / PART_BYTES));
    this.atomically(() => {
      this.sql.exec(
        'INSERT INTO kv_blocks (hash, parent, size, checksum, parts, last_used) VALUES (?, ?, ?, ?, ?, ?)',
        hash,
        parent,
        bytes.length,
        blockChecksum(bytes),
        parts,
        ++this.clock,
      );
      for (let i = 0; i < parts; i++) {
        this.sql.exec(
          'INSERT INTO kv_block_parts (hash, part, bytes) VALUES (?, ?, ?)',
          hash,
          i,
          bytes.slice(i * PART_BYTES, (i + 1) * PART_BYTES).buffer,
        );
      }
    });
    this.blocks++;
    this.bytes += bytes.length;
    return true;
  }

  touch(chain: readonly string[]): void {
    this.atomically(() => {
      for (let i = chain.length - 1; i >= 0; i--)
        this.sql.exec('UPDATE kv_blocks SET last_used = ? WHERE hash = ?', ++this.clock, chain[i]);
    });
  }

  pin(owner: string, chain: readonly string[]): void {
    this.atomically(() => {
      // Partial last blocks (named `<hash>+<tokens>`) of this owner's previous turn that no one else pins.
      const tails = this.sql
        .exec<{ hash: string }>(
          "SELECT hash FROM kv_pins p WHERE owner = ? AND hash LIKE '%+%' AND NOT EXISTS (SELECT 1 FROM kv_pins q WHERE q.hash = p.hash AND q.owner <> ?)",
          owner,
          owner,
        )
        .toArray();
      this.sql.exec('DELETE FROM kv_pins WHERE owner = ?', owner);
      for (const [position, hash] of chain.entries())
        this.sql.exec('INSERT INTO kv_pins (owner, position, hash) VALUES (?, ?, ?)', owner, position, hash);
      for (const { hash } of tails) if (!chain.includes(hash)) this.delete(hash);
    });
  }

  unpin(owner: string): void {
    this.atomically(() => {
      const only = this.sql
        .exec<{ hash: string }>(
          'SELECT hash FROM kv_pins p WHERE owner = ? AND NOT EXISTS (SELECT 1 FROM kv_pins q WHERE q.hash = p.hash AND q.owner <> ?)',
          owner,
          owner,
        )
        .toArray();
      this.sql.exec('DELETE FROM kv_pins WHERE owner = ?', owner);
      for (const { hash } of only) this.delete(hash);
    });
  }

  storedTokens(owner: string): number {
    const chain = this.sql
      .exec<{ hash: string; stored: number }>(
        'SELECT p.hash AS hash, b.hash IS NOT NULL AS stored FROM kv_pins p LEFT JOIN kv_blocks b ON b.hash = p.hash WHERE p.owner = ? ORDER BY p.position',
        owner,
      )
      .toArray();
    let tokens = 0;
    for (const { hash, stored } of chain) {
      if (!stored) break;
      tokens += blockTokens(hash, this.tokensPerBlock);
    }
    return tokens;
  }

  usage(): KvStoreUsage {
    return { blocks: this.blocks, bytes: this.bytes, budgetBytes: this.budgetBytes, discarded: this.discarded };
  }

  /** One transaction; if it fails, the counts are read again, since its deletes were rolled back. */
  private atomically<T>(fn: () => T): T {
    try {
      return this.transaction(fn);
    } catch (err) {
      this.recount();
      throw err;
    }
  }

  /**
   * Makes room for `incoming` bytes: evicts least recently used leaves (blocks no stored block names as
   * parent, so a chain goes from its tip), blocks of sessions' chains last. Once it must evict, it frees
   * down to 90% of the budget, so a full store does not search for victims at every write.
   */
  private makeRoom(incoming: number): void {
    if (this.bytes + incoming <= this.budgetBytes) return;
    const target = Math.min(this.budgetBytes - incoming, Math.floor(this.budgetBytes * 0.9));
    while (this.bytes > target && this.blocks > 0) {
      const victims = this.sql
        .exec<{ hash: string }>(
          `SELECT hash FROM kv_blocks b WHERE NOT EXISTS (SELECT 1 FROM kv_blocks c WHERE c.parent = b.hash)
           ORDER BY EXISTS (SELECT 1 FROM kv_pins p WHERE p.hash = b.hash), last_used LIMIT 64`,
        )
        .toArray();
      if (victims.length === 0) break;
      this.atomically(() => {
        for (const { hash } of victims) if (this.bytes > target) this.delete(hash);
      });
    }
  }

  /** Deletes a block and its parts (pins stay: a session's chain has a gap there now); call inside a transaction. */
  private delete(hash: string): void {
    const row = this.sql.exec<{ size: number }>('SELECT size FROM kv_blocks WHERE hash = ?', hash).toArray()[0];
    if (!row) return;
    this.sql.exec('DELETE FROM kv_block_parts WHERE hash = ?', hash);
    this.sql.exec('DELETE FROM kv_blocks WHERE hash = ?', hash);
    this.blocks--;
    this.bytes -= row.size;
  }

  private recount(): void {
    const row = this.sql
      .exec<{ blocks: number; bytes: number; clock: number }>(
        'SELECT count(*) AS blocks, coalesce(sum(size), 0) AS bytes, coalesce(max(last_used), 0) AS clock FROM kv_blocks',
      )
      .one();
    this.blocks = row.blocks;
    this.bytes = row.bytes;
    this.clock = row.clock;
  }
}

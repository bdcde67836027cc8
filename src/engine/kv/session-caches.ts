import type { KvCacheManager, PagedSequenceKv } from './paged-kv.js';

/** A finished session turn's cache: the blocks of `tokens`, kept for the session's next turn. */
interface PinnedCache {
  kv: PagedSequenceKv;
  tokens: number[];
}

/**
 * Session caches between turns, least recently kept first. A session's next turn takes its cache back
 * when its tokens extend the cached ones; any cache may be released when the pool needs room.
 */
export class SessionCaches {
  private readonly pinned = new Map<string, PinnedCache>();

  constructor(private readonly kv: KvCacheManager) {}

  get size(): number {
    return this.pinned.size;
  }

  /** Keeps `kv` (holding the first kv.length of `tokens`) for the session, replacing what it kept before. */
  keep(session: string, kv: PagedSequenceKv, tokens: readonly number[]): void {
    this.release(session);
    this.pinned.set(session, { kv, tokens: tokens.slice(0, kv.length) });
  }

  /** The session's cache, if it holds a strict prefix of `tokens`; otherwise it is released. */
  take(session: string, tokens: readonly number[], root?: string): PagedSequenceKv | undefined {
    const pin = this.pinned.get(session);
    if (!pin) return undefined;
    this.pinned.delete(session);
    // Only a cache computed as this turn computes (the same salt and adapter: its chain's root) continues it.
    const same = root === undefined || pin.kv.root === root;
    if (same && pin.tokens.length < tokens.length && pin.tokens.every((t, i) => t === tokens[i])) return pin.kv;
    this.kv.free(pin.kv);
    return undefined;
  }

  /** Tokens a session's kept cache holds now (0 once released for room, or never kept). */
  cachedTokens(session: string): number {
    return this.pinned.get(session)?.kv.length ?? 0;
  }

  /** Each kept cache's session and block table (for pictures of the pool; do not modify the tables). */
  *entries(): IterableIterator<{ session: string; kv: PagedSequenceKv }> {
    for (const [session, pin] of this.pinned) yield { session, kv: pin.kv };
  }

  release(session: string): void {
    const pin = this.pinned.get(session);
    if (!pin) return;
    this.pinned.delete(session);
    this.kv.free(pin.kv);
  }

  /** Releases the least recently kept cache; false when none is kept. */
  releaseOldest(): boolean {
    const oldest = this.pinned.keys().next();
    if (oldest.done) return false;
    this.release(oldest.value);
    return true;
  }
}

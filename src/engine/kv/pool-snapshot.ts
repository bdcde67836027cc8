import type { BlockPool } from './block-pool.js';

/**
 * A picture of one KV block pool at an instant, for people to look at (the playground) and for tests:
 * every block's state and reference count, and which blocks each sequence holds. Plain data, no HTTP.
 */
export interface PoolSnapshot {
  blockSize: number;
  total: number;
  used: number;
  free: number;
  cachedIdle: number;
  /**
   * One character per block id: `f` free, `u` held and not (yet) a full cached block, `p` held and a full
   * block cached under its prefix hash (shareable), `i` cached but idle (kept for reuse, evicted LRU first).
   */
  states: string;
  /** Reference count per block id: more than 1 means sequences share it (a common prefix, or a fork). */
  refs: number[];
  sequences: SequenceBlocks[];
}

export interface SequenceBlocks {
  /** The engine's key: the session id for session turns and kept session caches, `request-<n>` otherwise. */
  key: string;
  /** `running`: admitted to the batch; `waiting`: queued (holds no blocks yet); `kept`: a session's cache between turns. */
  state: 'running' | 'waiting' | 'kept';
  /** Tokens whose keys and values the blocks hold. */
  tokens: number;
  /** The block table: token position p lives in blocks[floor(p / blockSize)]. */
  blocks: number[];
}

export function snapshotPool(pool: BlockPool, sequences: SequenceBlocks[]): PoolSnapshot {
  const stats = pool.stats();
  const refs: number[] = [];
  let states = '';
  for (let id = 0; id < pool.numBlocks; id++) {
    const r = pool.refCount(id);
    refs.push(r);
    const cached = pool.isCached(id);
    states += r > 0 ? (cached ? 'p' : 'u') : cached ? 'i' : 'f';
  }
  return { blockSize: pool.blockSize, ...stats, states, refs, sequences };
}

import type { Engine } from '../engine/engine.js';

/** GET /v1/pool/{shard}: the shard's KV block pool as the playground draws it (see Engine.poolSnapshot). */
export type PoolView =
  | { object: 'kv_pool'; model: string; loaded: false }
  | ({ object: 'kv_pool'; model: string; loaded: true } & ReturnType<Engine['poolSnapshot']>);

/**
 * Characters of a session id shown: the shard and 6 random hex digits. Enough for a page to find its own
 * sessions by prefix, too few to act on anyone else's (a session id is what lets a caller read its transcript).
 */
const SHOWN_ID_CHARS = 6;

export function shownKey(key: string): string {
  const m = /^(\d+\.)(.*)$/.exec(key);
  return m ? `${m[1]}${m[2].slice(0, SHOWN_ID_CHARS)}` : key;
}

/** The pool of a loaded engine, with session ids shortened; a shard that has not loaded its model says so and loads nothing. */
export function poolView(engine: Engine | undefined, model: string): PoolView {
  if (!engine) return { object: 'kv_pool', model, loaded: false };
  const snapshot = engine.poolSnapshot();
  return {
    object: 'kv_pool',
    model,
    loaded: true,
    ...snapshot,
    sequences: snapshot.sequences.map((s) => ({ ...s, key: shownKey(s.key) })),
  };
}

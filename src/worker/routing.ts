import type { InferenceObject } from '../objects/inference-object.js';
import type { Env } from '../env.js';
import { intVar } from '../env.js';

/**
 * Which InferenceObject serves a request. Sessions and jobs carry their shard in their id
 * (`<shard>.<random>`), fixed at creation, so changing SHARD_COUNT never orphans them; stateless requests
 * go to the shard their prompt prefix hashes to, so requests sharing a system prompt share cached blocks.
 */

/** Characters of the prompt that pick its shard: long enough to tell system prompts apart. */
export const ROUTING_PREFIX_CHARS = 256;

export function shardCount(env: Env): number {
  return Math.max(1, Math.floor(intVar(env, 'SHARD_COUNT')));
}

export function shardStub(env: Env, shard: number): DurableObjectStub<InferenceObject> {
  const namespace = env.INFERENCE as unknown as DurableObjectNamespace<InferenceObject>;
  return namespace.get(namespace.idFromName(`shard-${shard}`));
}

/** FNV-1a over UTF-16 code units: stable, cheap, good enough to spread prefixes over shards. */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function shardForPrompt(env: Env, promptText: string): number {
  return hash32(promptText.slice(0, ROUTING_PREFIX_CHARS)) % shardCount(env);
}

/**
 * A hook is found by its owner and name: the same pair always meets the same object. The anonymous owner's
 * hooks (dev mode, and hooks made before tenants) hash by name alone, where they always were.
 */
export function shardForHook(env: Env, owner: string, name: string): number {
  return hash32(owner === '' ? name : `${owner}\n${name}`) % shardCount(env);
}

/**
 * The shard an id names, or null when the id is malformed. Syntax only: routes ask shard-ids.ts, which
 * also refuses shards never issued (ids are made there too).
 */
export function shardOfId(id: string): number | null {
  const m = /^(\d{1,6})\.[0-9a-zA-Z_-]{8,64}$/.exec(id);
  return m ? Number(m[1]) : null;
}

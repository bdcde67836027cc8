import type { Env } from '../env.js';
import { shardCount, shardOfId } from './routing.js';

/**
 * Ids of sessions and jobs name their shard (`<shard>.<random>`), and the shard a request names is the
 * Durable Object it starts, so an id is checked before anything is started: a client must not make the
 * service start (and load the model in) objects of its choosing. An id's shard is accepted when it is
 * below SHARD_COUNT, or when ID_SECRET is set and the id carries its HMAC: a signed id keeps reaching its
 * shard after SHARD_COUNT shrinks, as the design promises (sessions keep their shard), and cannot be forged for a shard never issued.
 * Signed ids are `<shard>.<24 hex random><16 hex tag>`, the same alphabet as unsigned ones.
 */

const RANDOM_HEX = 24;
const TAG_HEX = 16;

const hex = (bytes: Uint8Array): string => [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');

function idSecret(env: Env): string | undefined {
  return env.ID_SECRET?.trim() || undefined;
}

const keys = new Map<string, Promise<CryptoKey>>();

function hmacKey(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey('raw', new TextEncoder().encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, [
      'sign',
    ]);
    keys.set(secret, key);
  }
  return key;
}

async function tag(secret: string, unsigned: string): Promise<string> {
  const mac = await crypto.subtle.sign('HMAC', await hmacKey(secret), new TextEncoder().encode(unsigned));
  return hex(new Uint8Array(mac).subarray(0, TAG_HEX / 2));
}

/** Compares in time independent of where the strings differ: the tag is a secret's output. */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** A new id for something that lives on `shard`, signed when ID_SECRET is set. */
export async function issueId(env: Env, shard: number): Promise<string> {
  const unsigned = `${shard}.${hex(crypto.getRandomValues(new Uint8Array(RANDOM_HEX / 2)))}`;
  const secret = idSecret(env);
  return secret ? unsigned + (await tag(secret, unsigned)) : unsigned;
}

/** The shard `id` may be routed to, or null (the caller answers 404 without starting any object). */
export async function issuedShard(env: Env, id: string): Promise<number | null> {
  const shard = shardOfId(id);
  if (shard === null) return null;
  const secret = idSecret(env);
  const random = id.slice(id.indexOf('.') + 1);
  if (secret && random.length === RANDOM_HEX + TAG_HEX) {
    const unsigned = id.slice(0, id.length - TAG_HEX);
    if (sameText(id.slice(-TAG_HEX), await tag(secret, unsigned))) return shard;
  }
  return shard < shardCount(env) ? shard : null;
}

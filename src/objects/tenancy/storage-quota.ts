/**
 * What one key may keep in one shard's storage (issue 44): its sessions and hooks are counted, and a session's
 * system prompt is bounded when it is made (its turns are bounded by the context window), so a key's stored
 * bytes are bounded too. Past a cap the key is refused (429, nothing evicted): what a key stored is its own
 * to delete, never the service's to drop behind its back.
 */
import { intVar, type Env } from '../../env.js';
import type { ServiceError } from '../rpc-error.js';

/** The longest system prompt a session may keep: a hook template's bound (hook-template.ts), the same text's job. */
export const MAX_SYSTEM_CHARS = 32 * 1024;

export interface StorageQuotas {
  /** Sessions one key may keep on a shard (MAX_SESSIONS_PER_KEY). */
  sessionsPerKey: number;
  /** Hooks one key may keep on a shard (MAX_HOOKS_PER_KEY). */
  hooksPerKey: number;
}

export function storageQuotas(env: Env): StorageQuotas {
  return { sessionsPerKey: intVar(env, 'MAX_SESSIONS_PER_KEY'), hooksPerKey: intVar(env, 'MAX_HOOKS_PER_KEY') };
}

/** What one key keeps on a shard, for /metrics (per key name). */
export interface StoredUse {
  sessions: number;
  /** Bytes of its sessions' rows: system prompt, transcript, token log and defaults. */
  sessionBytes: number;
  hooks: number;
  /** Its conversations, and their bytes: items, metadata and token logs. */
  conversations: number;
  conversationBytes: number;
}

/** The 429 for a key at its cap of `what` (sessions, hooks) on this shard. */
export function quotaRefusal(what: string, count: number, limit: number, variable: string): ServiceError {
  return {
    status: 429,
    type: 'rate_limit_error',
    message: `this key keeps ${count} ${what} on this shard, its limit (${variable} ${limit}); delete some to make more`,
    param: null,
    code: 'storage_quota_exceeded',
  };
}

/** The 400 for a session's system prompt past MAX_SYSTEM_CHARS, or undefined when it fits. */
export function systemRefusal(system: string | undefined): ServiceError | undefined {
  if (system === undefined || system.length <= MAX_SYSTEM_CHARS) return undefined;
  return {
    status: 400,
    type: 'invalid_request_error',
    message: `system is ${system.length} characters; a session's system prompt may have at most ${MAX_SYSTEM_CHARS}`,
    param: 'system',
    code: 'string_above_max_length',
  };
}

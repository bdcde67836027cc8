/**
 * Sessions, hooks and jobs of one shard, built once per object instance over its SQLite storage (tables
 * are created if missing, so a new or restarted object is ready at once).
 */
import { boolVar, intVar, type Env } from '../env.js';
import { liveKeys } from './tenancy/live-keys.js';
import { JobStore } from './jobs.js';
import { ConversationStore } from './conversations.js';
import { ResponseStore } from './responses.js';
import { SessionStore } from './sessions.js';
import type { ShardContext } from './shard-context.js';
import { retryPolicyFromEnv } from './webhooks/backoff.js';
import { WebhookDispatcher } from './webhooks/dispatcher.js';
import { HookStore } from './webhooks/hooks.js';
import { Webhooks } from './webhooks/service.js';
import { storageQuotas, type StoredUse } from './tenancy/storage-quota.js';

export interface ShardServices {
  sessions: SessionStore;
  responses: ResponseStore;
  conversations: ConversationStore;
  webhooks: Webhooks;
  hooks: HookStore;
}

export function createShardServices(shard: ShardContext, storage: DurableObjectStorage, env: Env): ShardServices {
  const urls = { allowLoopback: boolVar(env, 'ALLOW_LOOPBACK_CALLBACKS') };
  const hooks = new HookStore(shard.sql);
  const jobs = new JobStore(shard.sql);
  const keyIsLive = liveKeys(env);
  const dispatcher = new WebhookDispatcher(shard, hooks, jobs, storage, retryPolicyFromEnv(env), urls, keyIsLive);
  const limits = { maxQueue: intVar(env, 'MAX_QUEUE'), maxJobsPerKey: intVar(env, 'MAX_JOBS_PER_KEY') };
  const conversations = new ConversationStore(shard, {
    maxPerKey: intVar(env, 'MAX_CONVERSATIONS_PER_KEY'),
    maxBytesPerKey: intVar(env, 'MAX_CONVERSATION_MB_PER_KEY') * 2 ** 20,
  });
  return {
    sessions: new SessionStore(shard),
    responses: new ResponseStore(
      shard,
      {
        ttlMs: intVar(env, 'RESPONSES_TTL_DAYS') * 86_400_000,
        maxPerKey: intVar(env, 'MAX_RESPONSES_PER_KEY'),
        maxBytesPerKey: intVar(env, 'MAX_RESPONSE_MB_PER_KEY') * 2 ** 20,
      },
      conversations,
    ),
    conversations,
    webhooks: new Webhooks(shard, hooks, jobs, dispatcher, urls, keyIsLive, limits, storageQuotas(env).hooksPerKey),
    hooks,
  };
}

/** What each key keeps in this shard's storage (sessions, conversations, their bytes, hooks), by key name. */
export function storedUse({ sessions, hooks, conversations }: ShardServices): Record<string, StoredUse> {
  const sessionUse = sessions.usageByKey();
  const hookCounts = hooks.countsByKey();
  const conversationUse = conversations.usageByKey();
  const use: Record<string, StoredUse> = {};
  const names = new Set([...Object.keys(sessionUse), ...Object.keys(hookCounts), ...Object.keys(conversationUse)]);
  for (const name of names)
    use[name] = {
      sessions: sessionUse[name]?.sessions ?? 0,
      sessionBytes: sessionUse[name]?.bytes ?? 0,
      hooks: hookCounts[name] ?? 0,
      conversations: conversationUse[name]?.conversations ?? 0,
      conversationBytes: conversationUse[name]?.bytes ?? 0,
    };
  return use;
}

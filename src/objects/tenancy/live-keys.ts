/**
 * Whether the key that owns a hook is still configured. A hook keeps working only while its key does:
 * once a key leaves API_KEYS, inbound events for its hooks are refused (401) and its unfinished jobs
 * stop, so nothing runs under the name of a key the operator removed. Read from the object's own env
 * (the same API_KEYS the worker checks), so the alarm, which runs without any request, judges it too.
 */
import type { Env } from '../../env.js';
import { apiKeys, devMode, tenantOf } from './api-keys.js';
import { ANONYMOUS_OWNER } from './tenant.js';

/** Whether rows of `owner` still belong to a configured key (in dev mode every row does). */
export type KeyIsLive = (owner: string) => Promise<boolean>;

export function liveKeys(env: Env): KeyIsLive {
  return async (owner) => {
    const keys = await apiKeys(env);
    if (devMode(keys)) return true;
    // Rows made in dev mode or before tenants belong to whichever key holds them (tenantOf's `legacy`).
    for (const { name } of keys) {
      const tenant = await tenantOf(env, keys, name);
      if (tenant.owner === owner || (owner === ANONYMOUS_OWNER && tenant.legacy)) return true;
    }
    return false;
  };
}

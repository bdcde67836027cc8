/**
 * Hook configurations: a Jinja template that turns an inbound event into a prompt, where to deliver
 * the result, the Standard Webhooks secret that both authenticates inbound events and signs deliveries,
 * and sampling params. Stored in the object's SQLite under its owner and name; the worker places a hook on
 * the shard its (owner, name) hashes to, and its path id names that shard.
 */
import type { SamplingFields } from '../sessions.js';
import { createOrRebuild } from '../tenancy/migrations.js';
import { ownerIds, type Tenant } from '../tenancy/tenant.js';

/** How the rendered template becomes a prompt: a user message in the model's chat template, or raw text. */
export type HookMode = 'chat' | 'completion';

export interface HookConfig {
  template: string;
  callback_url: string;
  secret: string;
  params: SamplingFields;
  mode: HookMode;
}

export interface Hook extends HookConfig {
  name: string;
  /** The path id inbound events address it by (`hk_<shard>.<random>`); null for hooks made before ids, until their next PUT. */
  id: string | null;
  /** Its owner (tenant.ts), never shown. */
  owner: string;
  /** The name of the key that made it (null: made before keys had names). */
  key_name: string | null;
  created_at: number;
  updated_at: number;
}

/** A hook as the API shows it: everything but the secret (of which only a hint is shown) and the owner id. */
export interface HookView extends Omit<Hook, 'secret' | 'owner'> {
  object: 'hook';
  secret_hint: string;
}

interface HookRow extends Record<string, SqlStorageValue> {
  owner: string;
  name: string;
  id: string | null;
  key_name: string | null;
  template: string;
  callback_url: string;
  secret: string;
  params: string;
  mode: string;
  created_at: number;
  updated_at: number;
}

/** Hook names are per owner: two keys can both have `summarise`, each its own. */
const SCHEMA = `CREATE TABLE hooks (
  owner TEXT NOT NULL DEFAULT '',
  name TEXT NOT NULL,
  id TEXT UNIQUE,
  key_name TEXT,
  template TEXT NOT NULL,
  callback_url TEXT NOT NULL,
  secret TEXT NOT NULL,
  params TEXT NOT NULL,
  mode TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (owner, name)
)`;

const COLUMNS = ['owner', 'name', 'id', 'key_name', 'template', 'callback_url', 'secret', 'params', 'mode'];

export class HookStore {
  constructor(private readonly sql: SqlStorage) {
    createOrRebuild(sql, 'hooks', SCHEMA, 'owner', [...COLUMNS, 'created_at', 'updated_at']);
  }

  /**
   * Replaces `tenant`'s hook `name` (keeping its id, or giving it `id` if it had none), or creates it with
   * `id` when `create` is set; undefined when there is none to replace and `create` is not set.
   */
  put(
    tenant: Tenant,
    name: string,
    config: HookConfig,
    id: string,
    create: boolean,
  ): { hook: Hook; created: boolean } | undefined {
    const now = Date.now();
    const existing = this.find(tenant, name);
    if (existing) {
      this.sql.exec(
        `UPDATE hooks SET template = ?, callback_url = ?, secret = ?, params = ?, mode = ?, id = COALESCE(id, ?),
           updated_at = ? WHERE owner = ? AND name = ?`,
        config.template,
        config.callback_url,
        config.secret,
        JSON.stringify(config.params),
        config.mode,
        id,
        now,
        existing.owner,
        name,
      );
      return { hook: this.row(existing.owner, name)!, created: false };
    }
    if (!create) return undefined;
    this.sql.exec(
      `INSERT INTO hooks (${COLUMNS.join(', ')}, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      tenant.owner,
      name,
      id,
      tenant.name,
      config.template,
      config.callback_url,
      config.secret,
      JSON.stringify(config.params),
      config.mode,
      now,
      now,
    );
    return { hook: this.row(tenant.owner, name)!, created: true };
  }

  /** How many hooks `owner` keeps on this shard (what MAX_HOOKS_PER_KEY caps). */
  countOf(owner: string): number {
    return this.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM hooks WHERE owner = ?', owner).one().n;
  }

  /** Hooks per key name (null names: made before keys had names), for /metrics. */
  countsByKey(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const row of this.sql
      .exec<{ key_name: string | null; n: number }>('SELECT key_name, COUNT(*) AS n FROM hooks GROUP BY key_name')
      .toArray())
      counts[row.key_name ?? ''] = row.n;
    return counts;
  }

  /** `tenant`'s hook `name`: its own, else (a tenant that holds them) one made before tenants. */
  find(tenant: Tenant, name: string): Hook | undefined {
    return this.byName(name, ownerIds(tenant));
  }

  /** The hook `name` of the first of `owners` that has one. */
  byName(name: string, owners: readonly string[]): Hook | undefined {
    for (const owner of owners) {
      const hook = this.row(owner, name);
      if (hook) return hook;
    }
    return undefined;
  }

  /** The hook an inbound event addresses by its path id. */
  byId(id: string): Hook | undefined {
    const row = this.sql.exec<HookRow>('SELECT * FROM hooks WHERE id = ?', id).toArray()[0];
    return row && fromRow(row);
  }

  /** The hook a job was made for (by owner and name: the job outlives a hook that is replaced). */
  row(owner: string, name: string): Hook | undefined {
    const row = this.sql.exec<HookRow>('SELECT * FROM hooks WHERE owner = ? AND name = ?', owner, name).toArray()[0];
    return row && fromRow(row);
  }

  delete(tenant: Tenant, name: string): boolean {
    const hook = this.find(tenant, name);
    return (
      hook !== undefined &&
      this.sql.exec('DELETE FROM hooks WHERE owner = ? AND name = ?', hook.owner, name).rowsWritten > 0
    );
  }
}

function fromRow(row: HookRow): Hook {
  return {
    name: row.name,
    id: row.id,
    owner: row.owner,
    key_name: row.key_name,
    template: row.template,
    callback_url: row.callback_url,
    secret: row.secret,
    params: JSON.parse(row.params) as SamplingFields,
    mode: row.mode as HookMode,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

export function hookView(hook: Hook): HookView {
  const { secret, owner: _owner, ...rest } = hook;
  return {
    ...rest,
    object: 'hook',
    secret_hint: `whsec_…${secret.slice(-4)}`,
    created_at: Math.floor(hook.created_at / 1000),
    updated_at: Math.floor(hook.updated_at / 1000),
  };
}

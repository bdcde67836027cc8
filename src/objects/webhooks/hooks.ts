/**
 * Hook configurations: a Jinja template that turns an inbound event into a prompt, where to deliver
 * the result, the Standard Webhooks secret that both authenticates inbound events and signs deliveries,
 * and sampling params. Stored in the object's SQLite; one hook name always lives on the same shard.
 */
import type { SamplingFields } from '../sessions.js';

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
  created_at: number;
  updated_at: number;
}

/** A hook as the API shows it: everything but the secret, of which only a hint is shown. */
export interface HookView extends Omit<Hook, 'secret'> {
  object: 'hook';
  secret_hint: string;
}

interface HookRow extends Record<string, SqlStorageValue> {
  name: string;
  template: string;
  callback_url: string;
  secret: string;
  params: string;
  mode: string;
  created_at: number;
  updated_at: number;
}

export class HookStore {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`CREATE TABLE IF NOT EXISTS hooks (
      name TEXT PRIMARY KEY,
      template TEXT NOT NULL,
      callback_url TEXT NOT NULL,
      secret TEXT NOT NULL,
      params TEXT NOT NULL,
      mode TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL
    )`);
  }

  /** Creates or replaces a hook; `created` says which. */
  put(name: string, config: HookConfig): { hook: Hook; created: boolean } {
    const now = Date.now();
    const existing = this.get(name);
    this.sql.exec(
      `INSERT INTO hooks (name, template, callback_url, secret, params, mode, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(name) DO UPDATE SET template = excluded.template, callback_url = excluded.callback_url, secret = excluded.secret,
         params = excluded.params, mode = excluded.mode, updated_at = excluded.updated_at`,
      name,
      config.template,
      config.callback_url,
      config.secret,
      JSON.stringify(config.params),
      config.mode,
      now,
      now,
    );
    return { hook: this.get(name)!, created: existing === undefined };
  }

  get(name: string): Hook | undefined {
    const row = this.sql.exec<HookRow>('SELECT * FROM hooks WHERE name = ?', name).toArray()[0];
    if (!row) return undefined;
    return {
      name: row.name,
      template: row.template,
      callback_url: row.callback_url,
      secret: row.secret,
      params: JSON.parse(row.params) as SamplingFields,
      mode: row.mode as HookMode,
      created_at: row.created_at,
      updated_at: row.updated_at,
    };
  }

  delete(name: string): boolean {
    return this.sql.exec('DELETE FROM hooks WHERE name = ?', name).rowsWritten > 0;
  }
}

export function hookView(hook: Hook): HookView {
  const { secret, ...rest } = hook;
  return {
    ...rest,
    object: 'hook',
    secret_hint: `whsec_…${secret.slice(-4)}`,
    created_at: Math.floor(hook.created_at / 1000),
    updated_at: Math.floor(hook.updated_at / 1000),
  };
}

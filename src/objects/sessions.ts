/**
 * Chat sessions: a transcript and the exact token log the model has seen, stored in the object's SQLite,
 * and a KV cache the engine keeps between turns under the session's id. Each turn appends the user's
 * segment to the log, generates from the whole log with `{ session: id }` (so only what is new is
 * prefilled), and records the reply when it finishes. The cache is only a cache: after an eviction or a
 * restart the log is prefilled again. A turn that does not finish (client gone, session deleted) leaves
 * the session as it was.
 */
import type { Engine } from '../engine/engine.js';
import type { GenerationRequest } from '../engine/request.js';
import type { DoneEvent } from '../engine/sequence-output.js';
import { loadRequestsAdapter, runGeneration, type Account, type EventSink } from './generation-run.js';
import { fail, fromEngineError, ok, type RpcResult, type ServiceError } from './rpc-error.js';
import { replyIds, turnFormat, userTurnIds } from './session-turns.js';
import type { ShardContext } from './shard-context.js';
import { addMissingColumns } from './tenancy/migrations.js';
import { ownerIds, type Tenant } from './tenancy/tenant.js';

/** Sampling fields a session keeps as defaults and a message may override (GenerationRequest spelling). */
export type SamplingFields = Omit<GenerationRequest, 'prompt' | 'prompt_ids' | 'messages'>;

export interface SessionMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface SessionView {
  id: string;
  object: 'session';
  model: string;
  system: string | null;
  /** The name of the key that made it (null: made before keys had names). */
  key_name: string | null;
  defaults: SamplingFields;
  messages: SessionMessage[];
  /** Tokens in the session's log (what the next turn's prompt starts with). */
  tokens: number;
  /** Of those, how many the shard's KV cache holds now (0 after a restart or once released for room). */
  cached_tokens: number;
  /**
   * Of those, how many the shard's storage holds as full KV blocks (written after each turn), which the
   * next turn restores if they are not cached: what survives a restart. 0 when KV_STORE_MB is 0.
   */
  stored_tokens: number;
  created_at: number;
  updated_at: number;
}

interface SessionRow extends Record<string, SqlStorageValue> {
  id: string;
  owner: string;
  key_name: string | null;
  model: string;
  system: string | null;
  defaults: string;
  messages: string;
  token_ids: string;
  created_at: number;
  updated_at: number;
}

const notFound = (id: string): ServiceError => ({
  status: 404,
  type: 'invalid_request_error',
  message: `no session '${id}'`,
  param: null,
  code: 'session_not_found',
});

const busy = (id: string): ServiceError => ({
  status: 409,
  type: 'invalid_request_error',
  message: `session '${id}' is answering another message; send the next one when that reply has finished`,
  param: null,
  code: 'session_busy',
});

export class SessionStore {
  /** Sessions with a turn in flight, and how to cancel it (DELETE). One turn at a time per session. */
  private readonly inFlight = new Map<string, () => void>();

  constructor(private readonly shard: ShardContext) {
    shard.sql.exec(`CREATE TABLE IF NOT EXISTS sessions (
      id TEXT PRIMARY KEY,
      model TEXT NOT NULL,
      system TEXT,
      defaults TEXT NOT NULL,
      messages TEXT NOT NULL,
      token_ids TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL,
      owner TEXT NOT NULL DEFAULT '',
      key_name TEXT
    )`);
    // Sessions made before tenants: their owner is empty, which is the anonymous (dev mode) owner's.
    addMissingColumns(shard.sql, 'sessions', { owner: "TEXT NOT NULL DEFAULT ''", key_name: 'TEXT' });
  }

  create(id: string, tenant: Tenant, init: { system?: string; defaults?: SamplingFields }): SessionView {
    const now = Date.now();
    const messages: SessionMessage[] = init.system !== undefined ? [{ role: 'system', content: init.system }] : [];
    this.shard.sql.exec(
      'INSERT INTO sessions (id, owner, key_name, model, system, defaults, messages, token_ids, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      id,
      tenant.owner,
      tenant.name,
      init.defaults?.adapter ?? this.shard.model,
      init.system ?? null,
      JSON.stringify(init.defaults ?? {}),
      JSON.stringify(messages),
      '[]',
      now,
      now,
    );
    return this.view(this.row(id, tenant)!);
  }

  /** How many sessions `owner` keeps on this shard (what MAX_SESSIONS_PER_KEY caps). */
  countOf(owner: string): number {
    return this.shard.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM sessions WHERE owner = ?', owner).one().n;
  }

  /** Sessions and their rows' bytes per key name (null names: made before keys had names), for /metrics. */
  usageByKey(): Record<string, { sessions: number; bytes: number }> {
    const usage: Record<string, { sessions: number; bytes: number }> = {};
    const rows = this.shard.sql
      .exec<{ key_name: string | null; n: number; bytes: number }>(
        `SELECT key_name, COUNT(*) AS n, SUM(LENGTH(CAST(COALESCE(system, '') AS BLOB)) + LENGTH(CAST(messages AS BLOB))
           + LENGTH(CAST(token_ids AS BLOB)) + LENGTH(CAST(defaults AS BLOB))) AS bytes FROM sessions GROUP BY key_name`,
      )
      .toArray();
    for (const row of rows) usage[row.key_name ?? ''] = { sessions: row.n, bytes: row.bytes };
    return usage;
  }

  /** Another tenant's session is not found, exactly as one that does not exist. */
  get(id: string, tenant: Tenant): RpcResult<SessionView> {
    const row = this.row(id, tenant);
    return row ? ok(this.view(row)) : fail(notFound(id));
  }

  /** Deletes the transcript, cancels a turn in flight and frees the session's KV cache. */
  delete(id: string, tenant: Tenant): RpcResult<{ id: string; object: 'session'; deleted: true }> {
    if (!this.row(id, tenant)) return fail(notFound(id));
    this.shard.sql.exec('DELETE FROM sessions WHERE id = ?', id);
    this.inFlight.get(id)?.();
    this.inFlight.delete(id);
    this.shard.loadedEngine()?.releaseSession(id);
    // Stored blocks too, whether or not this object has loaded the engine since they were written.
    this.shard.kvStore?.unpin(id);
    return ok({ id, object: 'session', deleted: true });
  }

  /**
   * Appends a user message and starts the reply, its events pushed to `sink` as for any generation. The
   * turn is written to storage before the done event is sent, so a client that has seen the end of the
   * reply can send the next message at once. `onSettled` gets the tokens generated once the turn has ended.
   */
  async message(
    id: string,
    tenant: Tenant,
    content: string,
    overrides: SamplingFields,
    sink: EventSink,
    run: { account: Account; onSettled(completionTokens: number): void },
  ): Promise<RpcResult<{ started: true }>> {
    const row = this.row(id, tenant);
    if (!row) return fail(notFound(id));
    if (this.inFlight.has(id)) return fail(busy(id));
    // Claim the session before the first await, so a concurrent message finds it busy.
    const claim = (): void => {};
    this.inFlight.set(id, claim);
    try {
      const engine = await this.shard.engine();
      if (this.inFlight.get(id) !== claim) return fail(notFound(id)); // deleted while the engine loaded
      turnFormat(engine);
      const log = JSON.parse(row.token_ids) as number[];
      const turn = userTurnIds(engine, log.length, row.system, content);
      const request: GenerationRequest = {
        ...(JSON.parse(row.defaults) as SamplingFields),
        ...overrides,
        prompt_ids: [...log, ...turn],
      };
      const adapter = await loadRequestsAdapter(engine, [request]);
      const generation = runGeneration(engine, [request], this.shard.metrics, sink, {
        session: id,
        adapter,
        account: run.account,
        onDone: (_index, done) => {
          this.recordTurn(engine, id, request, content, done);
          this.inFlight.delete(id);
        },
      });
      // DELETE meanwhile cancels the turn and tells the client why; the slot is freed however the turn ends.
      const holder = (): void =>
        generation.stop({ ...notFound(id), message: `session '${id}' was deleted while it was answering` });
      this.inFlight.set(id, holder);
      void generation.finished
        .then(
          ({ completionTokens }) => run.onSettled(completionTokens),
          () => run.onSettled(0),
        )
        .finally(() => this.release(id, holder));
      return ok({ started: true });
    } catch (err) {
      this.release(id, claim);
      return fail(fromEngineError(err));
    }
  }

  private release(id: string, holder: () => void): void {
    if (this.inFlight.get(id) === holder) this.inFlight.delete(id);
  }

  /** Writes a finished turn: the user message and the reply to the transcript, their tokens to the log. */
  private recordTurn(engine: Engine, id: string, request: GenerationRequest, content: string, done: DoneEvent): void {
    if (done.finishReason === 'cancelled') return;
    const row = this.row(id);
    if (!row) return;
    const log = [...request.prompt_ids!, ...replyIds(engine, done)];
    const messages = JSON.parse(row.messages) as SessionMessage[];
    messages.push({ role: 'user', content }, { role: 'assistant', content: done.text });
    this.shard.sql.exec(
      'UPDATE sessions SET messages = ?, token_ids = ?, updated_at = ? WHERE id = ?',
      JSON.stringify(messages),
      JSON.stringify(log),
      Date.now(),
      id,
    );
  }

  /** The session `id` if it is `tenant`'s (any owner's without a tenant: a turn recording its reply). */
  private row(id: string, tenant?: Tenant): SessionRow | undefined {
    if (!tenant) return this.shard.sql.exec<SessionRow>('SELECT * FROM sessions WHERE id = ?', id).toArray()[0];
    return this.shard.sql
      .exec<SessionRow>('SELECT * FROM sessions WHERE id = ? AND owner IN (?, ?)', id, ...ownerIds(tenant))
      .toArray()[0];
  }

  private view(row: SessionRow): SessionView {
    const tokens = (JSON.parse(row.token_ids) as number[]).length;
    return {
      id: row.id,
      object: 'session',
      model: row.model,
      system: row.system,
      key_name: row.key_name,
      defaults: JSON.parse(row.defaults) as SamplingFields,
      messages: JSON.parse(row.messages) as SessionMessage[],
      tokens,
      cached_tokens: this.shard.loadedEngine()?.sessionCachedTokens(row.id) ?? 0,
      stored_tokens: this.shard.kvStore?.storedTokens(row.id) ?? 0,
      created_at: Math.floor(row.created_at / 1000),
      updated_at: Math.floor(row.updated_at / 1000),
    };
  }
}

/**
 * Conversations (OpenAI's Conversations API) on a shard: a named, mutable session. A conversation keeps its
 * items (messages, function calls and outputs, reasoning) in order, and, once a response has run in it, the
 * exact token log the model has seen: a response in the conversation extends that log and continues the
 * KV cache the engine keeps under the conversation's id (stored and restored after a restart, as a
 * session's is), so only its new input is prefilled. Items added or deleted through the API make the log
 * stale: the next response renders the history again (the prefix cache still serves its unchanged start).
 * A conversation is its key's: to any other it does not exist.
 */
import type { ChatMessage } from '../engine/request.js';
import { chatHistory, type ConversationItem } from '../responses/conversation-items.js';
import { fail, ok, type RpcResult, type ServiceError } from './rpc-error.js';
import type { ShardContext } from './shard-context.js';
import { quotaRefusal } from './tenancy/storage-quota.js';
import { ownerIds, type Tenant } from './tenancy/tenant.js';

export interface ConversationLimits {
  /** Conversations one key may keep on a shard (MAX_CONVERSATIONS_PER_KEY). */
  maxPerKey: number;
  /** Bytes of conversations (items, metadata, token logs) one key may keep on a shard (MAX_CONVERSATION_MB_PER_KEY). */
  maxBytesPerKey: number;
}

export interface ConversationView {
  id: string;
  object: 'conversation';
  created_at: number;
  metadata: Record<string, string>;
}

export interface ConversationDeleted {
  id: string;
  object: 'conversation.deleted';
  deleted: true;
}

/** One RPC for the conversation's own routes (besides creating it), so the object's surface stays small. */
export type ConversationOp =
  | { op: 'get' | 'delete' | 'items' }
  | { op: 'update'; metadata: Record<string, string> }
  | { op: 'addItems'; items: ConversationItem[] }
  | { op: 'getItem' | 'deleteItem'; itemId: string };

interface ConversationRow extends Record<string, SqlStorageValue> {
  id: string;
  owner: string;
  metadata: string;
  /** The log after the last response, or null when the next response must render the history again. */
  token_ids: string | null;
  /** The instructions and render key the log was made under: a response extends it only under the same. */
  instructions: string | null;
  render_key: string | null;
  next_seq: number;
  created_at: number;
}

/** What a response in a conversation continues from: its history, and the log when it is still exact. */
export interface ConversationBase {
  messages: ChatMessage[];
  token_ids: string | null;
  instructions: string | null;
  render_key: string;
}

export const conversationNotFound = (id: string, param: string | null = null): ServiceError => ({
  status: 404,
  type: 'invalid_request_error',
  message: `no conversation '${id}'`,
  param,
  code: 'conversation_not_found',
});

const busy = (id: string, param: string | null = null): ServiceError => ({
  status: 409,
  type: 'invalid_request_error',
  message: `conversation '${id}' has a response in progress; change it when that response has finished`,
  param,
  code: 'conversation_busy',
});

const itemNotFound = (id: string): ServiceError => ({
  status: 404,
  type: 'invalid_request_error',
  message: `no item '${id}' in this conversation`,
  param: null,
  code: 'item_not_found',
});

export class ConversationStore {
  /** Conversations with a response in flight: one at a time, and their items are not changed meanwhile. */
  private readonly busy = new Set<string>();

  constructor(
    private readonly shard: ShardContext,
    private readonly limits: ConversationLimits,
  ) {
    shard.sql.exec(`CREATE TABLE IF NOT EXISTS conversations (
      id TEXT PRIMARY KEY,
      owner TEXT NOT NULL,
      key_name TEXT,
      metadata TEXT NOT NULL,
      token_ids TEXT,
      instructions TEXT,
      render_key TEXT,
      next_seq INTEGER NOT NULL,
      created_at INTEGER NOT NULL
    )`);
    shard.sql.exec('CREATE INDEX IF NOT EXISTS conversations_owner ON conversations (owner)');
    shard.sql.exec(`CREATE TABLE IF NOT EXISTS conversation_items (
      conversation TEXT NOT NULL,
      seq INTEGER NOT NULL,
      id TEXT NOT NULL,
      item TEXT NOT NULL,
      PRIMARY KEY (conversation, seq)
    )`);
    shard.sql.exec('CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_id ON conversation_items (conversation, id)');
  }

  create(
    id: string,
    tenant: Tenant,
    metadata: Record<string, string>,
    items: ConversationItem[],
  ): RpcResult<ConversationView> {
    const full = this.overCap(tenant, bytesOf(metadata, items), true);
    if (full) return fail(full);
    const now = Date.now();
    this.shard.sql.exec(
      'INSERT INTO conversations (id, owner, key_name, metadata, token_ids, instructions, render_key, next_seq, created_at) VALUES (?, ?, ?, ?, NULL, NULL, NULL, 0, ?)',
      id,
      tenant.owner,
      tenant.name,
      JSON.stringify(metadata),
      now,
    );
    this.insertItems(id, 0, items);
    return ok(view(this.row(id, tenant)!));
  }

  get(id: string, tenant: Tenant): RpcResult<ConversationView> {
    const row = this.row(id, tenant);
    return row ? ok(view(row)) : fail(conversationNotFound(id));
  }

  update(id: string, tenant: Tenant, metadata: Record<string, string>): RpcResult<ConversationView> {
    const row = this.row(id, tenant);
    if (!row) return fail(conversationNotFound(id));
    this.shard.sql.exec('UPDATE conversations SET metadata = ? WHERE id = ?', JSON.stringify(metadata), id);
    return ok({ ...view(row), metadata });
  }

  /** Deletes the conversation and its items, and frees its KV cache, kept and stored. */
  delete(id: string, tenant: Tenant): RpcResult<ConversationDeleted> {
    if (!this.row(id, tenant)) return fail(conversationNotFound(id));
    // A response in flight would keep the cache under this id once it finished: it finishes first.
    if (this.busy.has(id)) return fail(busy(id));
    this.shard.sql.exec('DELETE FROM conversation_items WHERE conversation = ?', id);
    this.shard.sql.exec('DELETE FROM conversations WHERE id = ?', id);
    this.shard.loadedEngine()?.releaseSession(id);
    this.shard.kvStore?.unpin(id);
    return ok({ id, object: 'conversation.deleted', deleted: true });
  }

  /** Appends items (POST /v1/conversations/{id}/items): the log is stale from now on. */
  addItems(id: string, tenant: Tenant, items: ConversationItem[]): RpcResult<ConversationItem[]> {
    const row = this.row(id, tenant);
    if (!row) return fail(conversationNotFound(id));
    if (this.busy.has(id)) return fail(busy(id));
    const taken = items.find((item) => this.item(id, item.id));
    if (taken)
      return fail({
        status: 400,
        type: 'invalid_request_error',
        message: `item '${taken.id}' is already in this conversation`,
        param: 'items',
        code: 'invalid_value',
      });
    const full = this.overCap(tenant, bytesOf({}, items), false);
    if (full) return fail(full);
    this.insertItems(id, row.next_seq, items);
    this.shard.sql.exec('UPDATE conversations SET token_ids = NULL WHERE id = ?', id);
    return ok(items);
  }

  /** The conversation's items in order, oldest first. */
  items(id: string, tenant: Tenant): RpcResult<ConversationItem[]> {
    if (!this.row(id, tenant)) return fail(conversationNotFound(id));
    return ok(this.allItems(id));
  }

  getItem(id: string, itemId: string, tenant: Tenant): RpcResult<ConversationItem> {
    if (!this.row(id, tenant)) return fail(conversationNotFound(id));
    const item = this.item(id, itemId);
    return item ? ok(item) : fail(itemNotFound(itemId));
  }

  /** Deletes one item (the log is stale from now on); answers the conversation, as OpenAI does. */
  deleteItem(id: string, itemId: string, tenant: Tenant): RpcResult<ConversationView> {
    const row = this.row(id, tenant);
    if (!row) return fail(conversationNotFound(id));
    if (this.busy.has(id)) return fail(busy(id));
    if (!this.item(id, itemId)) return fail(itemNotFound(itemId));
    this.shard.sql.exec('DELETE FROM conversation_items WHERE conversation = ? AND id = ?', id, itemId);
    this.shard.sql.exec('UPDATE conversations SET token_ids = NULL WHERE id = ?', id);
    return ok(view(row));
  }

  /**
   * Takes the conversation for a response: its history and log, or the error that refuses it (unknown,
   * busy, or its key at its byte cap). `release` must be called once the response has settled.
   */
  begin(id: string, tenant: Tenant): RpcResult<ConversationBase> {
    const row = this.row(id, tenant);
    if (!row) return fail(conversationNotFound(id, 'conversation'));
    if (this.busy.has(id)) return fail(busy(id, 'conversation'));
    const full = this.overCap(tenant, 0, false);
    if (full) return fail(full);
    this.busy.add(id);
    return ok({
      messages: chatHistory(this.allItems(id)),
      token_ids: row.token_ids,
      instructions: row.instructions,
      render_key: row.render_key ?? '',
    });
  }

  release(id: string): void {
    this.busy.delete(id);
  }

  /** A finished response's input and output items, appended with the log it leaves (null: render again). */
  append(
    id: string,
    items: ConversationItem[],
    log: { token_ids: string | null; instructions: string | null; render_key: string },
  ): void {
    // The conversation may have been deleted while the response ran: then there is nothing to append to.
    const row = this.shard.sql
      .exec<{ next_seq: number }>('SELECT next_seq FROM conversations WHERE id = ?', id)
      .toArray()[0];
    if (!row) return;
    this.insertItems(id, row.next_seq, items);
    this.shard.sql.exec(
      'UPDATE conversations SET token_ids = ?, instructions = ?, render_key = ? WHERE id = ?',
      log.token_ids,
      log.instructions,
      log.render_key,
      id,
    );
  }

  /** A tenant's conversations and their bytes (for the caps). */
  private usage(tenant: Tenant): { count: number; bytes: number } {
    const owners = ownerIds(tenant);
    const head = this.shard.sql
      .exec<{ n: number; b: number | null }>(
        `SELECT COUNT(*) AS n, SUM(${HEAD_BYTES}) AS b FROM conversations WHERE owner IN (?, ?)`,
        ...owners,
      )
      .one();
    const items = this.shard.sql
      .exec<{ b: number | null }>(
        `SELECT SUM(${ITEM_BYTES}) AS b FROM conversation_items i JOIN conversations c ON c.id = i.conversation WHERE c.owner IN (?, ?)`,
        ...owners,
      )
      .one();
    return { count: head.n, bytes: (head.b ?? 0) + (items.b ?? 0) };
  }

  /** Conversations and their bytes per key name, for /metrics. */
  usageByKey(): Record<string, { conversations: number; bytes: number }> {
    const usage: Record<string, { conversations: number; bytes: number }> = {};
    const heads = this.shard.sql
      .exec<{ key_name: string | null; n: number; b: number }>(
        `SELECT key_name, COUNT(*) AS n, SUM(${HEAD_BYTES}) AS b FROM conversations GROUP BY key_name`,
      )
      .toArray();
    for (const row of heads) usage[row.key_name ?? ''] = { conversations: row.n, bytes: row.b };
    const items = this.shard.sql
      .exec<{ key_name: string | null; b: number }>(
        `SELECT c.key_name AS key_name, SUM(${ITEM_BYTES}) AS b FROM conversation_items i JOIN conversations c ON c.id = i.conversation GROUP BY c.key_name`,
      )
      .toArray();
    for (const row of items) {
      const use = usage[row.key_name ?? ''];
      if (use) use.bytes += row.b;
    }
    return usage;
  }

  /** A 429 when `tenant` keeps as many conversations (for a new one), or as many bytes of them, as it may. */
  private overCap(tenant: Tenant, adding: number, creating: boolean): ServiceError | undefined {
    const { count, bytes } = this.usage(tenant);
    if (creating && count >= this.limits.maxPerKey)
      return quotaRefusal('conversations', count, this.limits.maxPerKey, 'MAX_CONVERSATIONS_PER_KEY');
    if (bytes + adding > this.limits.maxBytesPerKey)
      return {
        status: 429,
        type: 'rate_limit_error',
        message: `this key keeps ${bytes} bytes of conversations on this shard; ${adding} more would pass its limit (MAX_CONVERSATION_MB_PER_KEY ${this.limits.maxBytesPerKey / 2 ** 20} MiB); delete some to add more`,
        param: null,
        code: 'storage_quota_exceeded',
      };
    return undefined;
  }

  private insertItems(id: string, from: number, items: ConversationItem[]): void {
    for (const [i, item] of items.entries())
      this.shard.sql.exec(
        'INSERT INTO conversation_items (conversation, seq, id, item) VALUES (?, ?, ?, ?)',
        id,
        from + i,
        item.id,
        JSON.stringify(item),
      );
    this.shard.sql.exec('UPDATE conversations SET next_seq = ? WHERE id = ?', from + items.length, id);
  }

  private allItems(id: string): ConversationItem[] {
    return this.shard.sql
      .exec<{ item: string }>('SELECT item FROM conversation_items WHERE conversation = ? ORDER BY seq', id)
      .toArray()
      .map((r) => JSON.parse(r.item) as ConversationItem);
  }

  private item(id: string, itemId: string): ConversationItem | undefined {
    const row = this.shard.sql
      .exec<{ item: string }>('SELECT item FROM conversation_items WHERE conversation = ? AND id = ?', id, itemId)
      .toArray()[0];
    return row && (JSON.parse(row.item) as ConversationItem);
  }

  private row(id: string, tenant: Tenant): ConversationRow | undefined {
    return this.shard.sql
      .exec<ConversationRow>('SELECT * FROM conversations WHERE id = ? AND owner IN (?, ?)', id, ...ownerIds(tenant))
      .toArray()[0];
  }
}

/** Bytes a conversation's row and one item keep (what MAX_CONVERSATION_MB_PER_KEY caps). */
const HEAD_BYTES = 'LENGTH(CAST(metadata AS BLOB)) + IFNULL(LENGTH(CAST(token_ids AS BLOB)), 0)';
const ITEM_BYTES = 'LENGTH(CAST(i.item AS BLOB))';

const view = (row: ConversationRow): ConversationView => ({
  id: row.id,
  object: 'conversation',
  created_at: Math.floor(row.created_at / 1000),
  metadata: JSON.parse(row.metadata) as Record<string, string>,
});

const encoder = new TextEncoder();
const bytesOf = (metadata: Record<string, string>, items: ConversationItem[]): number =>
  encoder.encode(JSON.stringify(metadata)).length +
  items.reduce((n, item) => n + encoder.encode(JSON.stringify(item)).length, 0);

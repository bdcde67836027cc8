/**
 * Stored responses (OpenAI's Responses API) on a shard: a response is a session turn, and a chain of
 * responses linked by `previous_response_id` is a session. Each stored response keeps the chat history it
 * ends (for a chain whose instructions or tools change) and the exact token log the model has seen, so a
 * response continuing the latest one of its chain extends that log and the engine continues the chain's
 * KV cache, kept under the chain's key (and in storage, restored after a restart, as sessions' is).
 * Continuing an older response starts a new chain from its log: the prefix blocks the two share are the
 * same blocks (named by their hashes), and the other branch is left as it was.
 */
import type { LoraAdapter } from '../engine/adapters/lora-adapter.js';
import type { Engine } from '../engine/engine.js';
import type { ChatMessage, GenerationRequest } from '../engine/request.js';
import type { DoneEvent } from '../engine/sequence-output.js';
import { assistantMessage, outputItems, type InputItem } from '../responses/output-items.js';
import type { ReasoningFormat } from '../responses/reasoning.js';
import { responseView, type ResponseSpec, type ResponseView } from '../responses/response-view.js';
import type { ConversationBase, ConversationStore } from './conversations.js';
import { runGeneration, type Account, type EventSink } from './generation-run.js';
import { fail, fromEngineError, ok, type RpcResult, type ServiceError } from './rpc-error.js';
import { replyIds, turnFormat } from './session-turns.js';
import type { ShardContext } from './shard-context.js';
import { ownerIds, type Tenant } from './tenancy/tenant.js';
import { promptReasoning, reasoningOf, reasoningTokens } from './template-reasoning.js';

export interface ResponseLimits {
  ttlMs: number;
  maxPerKey: number;
  maxBytesPerKey: number;
}

interface ResponseRow extends Record<string, SqlStorageValue> {
  id: string;
  owner: string;
  chain: string;
  head: number;
  instructions: string | null;
  /** What the prompt was rendered with besides messages (tools, template variables): a chain extends only under the same. */
  render_key: string;
  messages: string;
  /** The token log after this response, or null when the next response must render the history again. */
  token_ids: string | null;
  input_items: string;
  view: string;
  bytes: number;
  created_at: number;
  expires_at: number;
}

const notFound = (id: string, param: string | null = null): ServiceError => ({
  status: 404,
  type: 'invalid_request_error',
  message: `no response '${id}' (it may have expired, been deleted, or been made with store: false)`,
  param,
  code: 'response_not_found',
});

export class ResponseStore {
  /** Chains with a response in flight: a second continuation of the same one branches instead. */
  private readonly busy = new Set<string>();

  constructor(
    private readonly shard: ShardContext,
    private readonly limits: ResponseLimits,
    private readonly conversations: ConversationStore,
  ) {
    shard.sql.exec(`CREATE TABLE IF NOT EXISTS responses (
      id TEXT PRIMARY KEY,
      owner TEXT NOT NULL,
      chain TEXT NOT NULL,
      head INTEGER NOT NULL,
      instructions TEXT,
      render_key TEXT NOT NULL,
      messages TEXT NOT NULL,
      token_ids TEXT,
      input_items TEXT NOT NULL,
      view TEXT NOT NULL,
      bytes INTEGER NOT NULL,
      created_at INTEGER NOT NULL,
      expires_at INTEGER NOT NULL
    )`);
    shard.sql.exec('CREATE INDEX IF NOT EXISTS responses_chain ON responses (chain)');
    shard.sql.exec('CREATE INDEX IF NOT EXISTS responses_owner ON responses (owner)');
    shard.sql.exec('CREATE INDEX IF NOT EXISTS responses_expiry ON responses (expires_at)');
  }

  /**
   * Starts the response `spec` describes, its events pushed to `sink` as for any generation. A stored
   * response is written before its done event is sent (that event carries the finished response), so a
   * client that has it can continue from it at once.
   */
  async start(
    spec: ResponseSpec,
    tenant: Tenant,
    sink: EventSink,
    run: { account: Account; onSettled(completionTokens: number): void },
  ): Promise<RpcResult<{ reasoning: ReasoningFormat | undefined }>> {
    this.purgeExpired();
    const previous = spec.previous_response_id ? this.row(spec.previous_response_id, tenant) : undefined;
    if (spec.previous_response_id && !previous)
      return fail(notFound(spec.previous_response_id, 'previous_response_id'));
    if (spec.store) {
      const full = this.overCap(tenant);
      if (full) return fail(full);
    }
    // A response in a conversation continues it (one at a time): its history, and its log while that is exact.
    let conversation: ConversationBase | undefined;
    if (spec.conversation) {
      const taken = this.conversations.begin(spec.conversation, tenant);
      if (!taken.ok) return taken;
      conversation = taken.value;
    }
    const leave = (): void => {
      if (spec.conversation) this.conversations.release(spec.conversation);
    };
    let engine: Engine;
    let request: GenerationRequest;
    let format: ReasoningFormat | undefined;
    let history: ChatMessage[];
    let adapter: LoraAdapter | undefined;
    try {
      engine = await this.shard.engine();
      // `model` naming one of the model's LoRA adapters (the route lets any name through; 404 here for an unknown one).
      adapter = spec.model !== this.shard.model ? await engine.loadAdapter(spec.model) : undefined;
      history = conversation?.messages ?? (previous ? (JSON.parse(previous.messages) as ChatMessage[]) : []);
      const promptIds = this.promptIds(engine, spec, conversation ?? previous, history);
      request = {
        prompt_ids: promptIds,
        ...(spec.temperature !== null ? { temperature: spec.temperature } : {}),
        ...(spec.top_p !== null ? { top_p: spec.top_p } : {}),
        ...(spec.max_output_tokens !== null ? { max_tokens: spec.max_output_tokens } : {}),
        ...(spec.constraint ? { constraint: spec.constraint } : {}),
      };
      engine.resolve(request);
      format = promptReasoning(engine, promptIds);
    } catch (err) {
      leave();
      return fail(fromEngineError(err));
    }
    // The latest response of its chain (and not being continued already) is continued in place; any other
    // branches. A conversation's cache is kept under its id; its stored responses are chains of their own.
    const chain = previous && previous.head === 1 && !this.busy.has(previous.chain) ? previous.chain : spec.id;
    const session = spec.conversation ?? (spec.store ? chain : undefined);
    if (session && !spec.conversation) this.busy.add(session);
    const settle = (): void => {
      if (session && !spec.conversation) this.busy.delete(session);
      leave();
    };
    try {
      const generation = runGeneration(engine, [request], this.shard.metrics, sink, {
        session,
        adapter,
        account: run.account,
        onDone: (_index, done) => {
          const view = this.finish(engine, spec, request, format, done);
          if (done.finishReason !== 'cancelled') {
            const log = logAfter(engine, request, view, done);
            if (spec.store) this.record(spec, tenant, chain, history, view, log);
            if (spec.conversation)
              this.conversations.append(spec.conversation, [...spec.input, ...view.output], {
                token_ids: log,
                instructions: spec.instructions,
                render_key: renderKey(spec),
              });
          }
          settle();
          return { response: view };
        },
      });
      void generation.finished
        .then(
          ({ completionTokens }) => run.onSettled(completionTokens),
          () => run.onSettled(0),
        )
        .finally(settle);
      return ok({ reasoning: format });
    } catch (err) {
      settle();
      return fail(fromEngineError(err));
    }
  }

  /**
   * The prompt: the previous response's token log and the new input's segment when the chain is extended
   * under the same instructions and tools; otherwise the whole history rendered again (the prefix cache
   * still finds the blocks of whatever part of it is unchanged).
   */
  private promptIds(
    engine: Engine,
    spec: ResponseSpec,
    previous: Pick<ResponseRow, 'token_ids' | 'instructions' | 'render_key'> | undefined,
    history: ChatMessage[],
  ): number[] {
    const render = (messages: ChatMessage[], withTools: boolean): number[] =>
      engine.resolve({
        messages,
        max_tokens: 1,
        ...(withTools && spec.tools ? { tools: spec.tools } : {}),
        ...(spec.chat_template_kwargs ? { chat_template_kwargs: spec.chat_template_kwargs } : {}),
      }).promptIds;
    if (
      previous?.token_ids &&
      previous.instructions === spec.instructions &&
      previous.render_key === renderKey(spec) &&
      extendable(engine)
    )
      return [...(JSON.parse(previous.token_ids) as number[]), ...render(spec.messages, false)];
    const system: ChatMessage[] = spec.instructions !== null ? [{ role: 'system', content: spec.instructions }] : [];
    return render([...system, ...history, ...spec.messages], true);
  }

  /** The finished response: output items from the text, usage from the engine's counts. */
  private finish(
    engine: Engine,
    spec: ResponseSpec,
    request: GenerationRequest,
    format: ReasoningFormat | undefined,
    done: DoneEvent,
  ): ResponseView {
    return responseView(spec, {
      output: outputItems(spec.id, done.text, {
        reasoning: format,
        parseTools: spec.parse_tools,
        incomplete: done.finishReason === 'length',
      }),
      finishReason: done.finishReason,
      promptTokens: request.prompt_ids!.length,
      cachedTokens: done.metrics.cachedTokens,
      completionTokens: done.metrics.completionTokens,
      reasoningTokens: reasoningTokens(engine, format, done.tokenIds),
    });
  }

  private record(
    spec: ResponseSpec,
    tenant: Tenant,
    chain: string,
    history: ChatMessage[],
    view: ResponseView,
    log: string | null,
  ): void {
    const messages = [...history, ...spec.messages, assistantMessage(view.output)];
    const texts = [JSON.stringify(messages), JSON.stringify(spec.input), JSON.stringify(view)];
    const bytes = texts.reduce((n, t) => n + t.length, 0) + (log?.length ?? 0);
    const now = Date.now();
    this.shard.sql.exec('UPDATE responses SET head = 0 WHERE chain = ?', chain);
    this.shard.sql.exec(
      'INSERT INTO responses (id, owner, chain, head, instructions, render_key, messages, token_ids, input_items, view, bytes, created_at, expires_at) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      spec.id,
      tenant.owner,
      chain,
      spec.instructions,
      renderKey(spec),
      texts[0],
      log,
      texts[1],
      texts[2],
      bytes,
      now,
      now + this.limits.ttlMs,
    );
  }

  /** A 429 when `tenant` keeps as many responses, or as many bytes of them, as it may on this shard. */
  private overCap(tenant: Tenant): ServiceError | undefined {
    const [count, bytes] = this.shard.sql
      .exec<{ n: number; b: number | null }>(
        'SELECT COUNT(*) AS n, SUM(bytes) AS b FROM responses WHERE owner IN (?, ?)',
        ...ownerIds(tenant),
      )
      .toArray()
      .map((r) => [r.n, r.b ?? 0])[0];
    const over =
      count >= this.limits.maxPerKey
        ? `${count} stored responses, its limit (MAX_RESPONSES_PER_KEY ${this.limits.maxPerKey})`
        : bytes >= this.limits.maxBytesPerKey
          ? `${bytes} bytes of stored responses, its limit (MAX_RESPONSE_MB_PER_KEY ${this.limits.maxBytesPerKey / 2 ** 20} MiB)`
          : undefined;
    if (!over) return undefined;
    return {
      status: 429,
      type: 'invalid_request_error',
      message: `this key keeps ${over} on this shard; delete some (DELETE /v1/responses/{id}), wait for them to expire, or send store: false`,
      param: 'store',
      code: 'too_many_stored_responses',
    };
  }

  get(id: string, tenant: Tenant): RpcResult<ResponseView> {
    this.purgeExpired();
    const row = this.row(id, tenant);
    return row ? ok(JSON.parse(row.view) as ResponseView) : fail(notFound(id));
  }

  inputItems(id: string, tenant: Tenant): RpcResult<InputItem[]> {
    this.purgeExpired();
    const row = this.row(id, tenant);
    return row ? ok(JSON.parse(row.input_items) as InputItem[]) : fail(notFound(id));
  }

  /** Deletes a stored response; a chain left with none frees its KV cache, kept and stored. */
  delete(id: string, tenant: Tenant): RpcResult<{ id: string; object: 'response'; deleted: true }> {
    const row = this.row(id, tenant);
    if (!row) return fail(notFound(id));
    this.shard.sql.exec('DELETE FROM responses WHERE id = ?', id);
    this.releaseIfEmpty(row.chain);
    return ok({ id, object: 'response', deleted: true });
  }

  /** Drops expired responses (and the caches of chains left empty). */
  private purgeExpired(): void {
    const chains = this.shard.sql
      .exec<{ chain: string }>('SELECT DISTINCT chain FROM responses WHERE expires_at <= ?', Date.now())
      .toArray();
    if (chains.length === 0) return;
    this.shard.sql.exec('DELETE FROM responses WHERE expires_at <= ?', Date.now());
    for (const { chain } of chains) this.releaseIfEmpty(chain);
  }

  private releaseIfEmpty(chain: string): void {
    if (this.shard.sql.exec('SELECT 1 FROM responses WHERE chain = ? LIMIT 1', chain).toArray().length > 0) return;
    this.shard.loadedEngine()?.releaseSession(chain);
    this.shard.kvStore?.unpin(chain);
  }

  private row(id: string, tenant: Tenant): ResponseRow | undefined {
    return this.shard.sql
      .exec<ResponseRow>(
        'SELECT * FROM responses WHERE id = ? AND owner IN (?, ?) AND expires_at > ?',
        id,
        ...ownerIds(tenant),
        Date.now(),
      )
      .toArray()[0];
  }
}

/**
 * The token log a finished response leaves (JSON), or null when the next response must render the history
 * again: where the template drops earlier answers' reasoning, the log the model saw is not what the next
 * prompt renders (and this reply is prefilled again).
 */
function logAfter(engine: Engine, request: GenerationRequest, view: ResponseView, done: DoneEvent): string | null {
  const reasoned = view.output.some((item) => item.type === 'reasoning');
  const exact = extendable(engine) && !(reasoned && reasoningOf(engine).dropsReasoning);
  return exact ? JSON.stringify([...request.prompt_ids!, ...replyIds(engine, done)]) : null;
}

const renderKey = (spec: ResponseSpec): string =>
  JSON.stringify({ tools: spec.tools, kwargs: spec.chat_template_kwargs ?? null });

/** Whether a log can be extended turn by turn (the template renders each message on its own: session-turns.ts). */
function extendable(engine: Engine): boolean {
  try {
    turnFormat(engine);
    return true;
  } catch {
    return false;
  }
}

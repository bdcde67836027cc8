/**
 * The webhooks side of a shard, as the object's RPC methods need it: hook configuration, inbound events
 * (verified per Standard Webhooks, deduplicated by webhook-id, rendered into a job) and job status.
 */
import { quotaRefusal } from '../tenancy/storage-quota.js';
import { InvalidRequestError } from '../../engine/errors.js';
import type { JobStore, JobView } from '../jobs.js';
import { jobView } from '../jobs.js';
import { fail, fromEngineError, invalidRequest, ok, type RpcResult, type ServiceError } from '../rpc-error.js';
import type { SamplingFields } from '../sessions.js';
import type { ShardContext } from '../shard-context.js';
import type { RateLimitState, Ticket } from '../tenancy/rate-limiter.js';
import { ANONYMOUS_NAME, type Tenant } from '../tenancy/tenant.js';
import { checkCallbackUrl, type CallbackUrlPolicy } from './callback-url.js';
import type { WebhookDispatcher } from './dispatcher.js';
import { checkTemplate, renderHookTemplate } from './hook-template.js';
import { hookView, type Hook, type HookMode, type HookStore, type HookView } from './hooks.js';
import { parseSecret, WebhookSigner, WebhookVerificationError } from './standard-webhooks.js';
import { deliverySecret } from './delivery-key.js';
import type { KeyIsLive } from '../tenancy/live-keys.js';
import { queueRefusal } from '../tenancy/queue-share.js';
import { readJsonText } from '../../json-limits.js';

export interface HookInput {
  template: string;
  callback_url: string;
  secret: string;
  params?: SamplingFields;
  mode?: HookMode;
}

export interface AcceptedEvent {
  job_id: string;
  status: string;
  /** True when this webhook-id was seen before: the earlier job is answered, nothing runs again. */
  duplicate: boolean;
  /** The hook owner's rate limits after this event (absent when it has none, and for a duplicate). */
  rateLimit?: RateLimitState;
}

/**
 * Which hook an inbound event is for: by its path id, or by name among the owners that may be meant
 * (single-key and dev deployments, and hooks made before tenants), the first that has one.
 */
export type HookAddress = { id: string } | { name: string; owners: string[] };

/** A rate-limit admission for a key, or the error refusing it (429, or 503 for a bad RATE_LIMITS). */
export type Admit = (keyName: string) => RpcResult<{ ticket: Ticket; state: RateLimitState }>;

const notFound = (what: string, code: string): ServiceError => ({
  status: 404,
  type: 'invalid_request_error',
  message: what,
  param: null,
  code,
});

/** The limits inbound events are held to, besides the owner's rate limits. */
export interface EventLimits {
  /** The shard's queue (MAX_QUEUE, in sequences, shared fairly between keys). */
  maxQueue: number;
  /** Unfinished jobs one key may have on the shard (MAX_JOBS_PER_KEY). */
  maxJobsPerKey: number;
}

/** A hook as its owner sees it: with the secret its deliveries are signed with (delivery-key.ts). */
export type OwnHookView = HookView & { delivery_secret: string };

const ownView = async (hook: Hook): Promise<OwnHookView> => ({
  ...hookView(hook),
  delivery_secret: await deliverySecret(hook.secret),
});

export class Webhooks {
  constructor(
    private readonly shard: ShardContext,
    private readonly hooks: HookStore,
    private readonly jobs: JobStore,
    readonly dispatcher: WebhookDispatcher,
    private readonly urls: CallbackUrlPolicy,
    private readonly keyIsLive: KeyIsLive,
    private readonly limits: EventLimits,
    /** Hooks one key may keep on this shard (MAX_HOOKS_PER_KEY). */
    private readonly hooksPerKey = Number.POSITIVE_INFINITY,
  ) {}

  /**
   * Creates or replaces `tenant`'s hook after checking its secret, callback URL, template and params. A
   * new hook gets `id`; with `create` unset, only an existing one is replaced (404 when there is none).
   */
  async putHook(
    tenant: Tenant,
    name: string,
    input: HookInput,
    id: string,
    create: boolean,
    selfHost?: string,
  ): Promise<RpcResult<{ hook: OwnHookView; created: boolean }>> {
    const full = (): ServiceError | undefined => {
      if (!create || this.hooks.find(tenant, name)) return undefined;
      const count = this.hooks.countOf(tenant.owner);
      return count >= this.hooksPerKey
        ? quotaRefusal('hooks', count, this.hooksPerKey, 'MAX_HOOKS_PER_KEY')
        : undefined;
    };
    const before = full();
    if (before) return fail(before);
    const secret = parseSecret(input.secret);
    if ('error' in secret) return fail(invalidRequest(secret.error, 'secret'));
    const url = checkCallbackUrl(input.callback_url, { ...this.urls, selfHost });
    if (!url.ok) return fail(invalidRequest(url.reason, 'callback_url', 'invalid_callback_url'));
    const templateError = checkTemplate(input.template);
    if (templateError) return fail(invalidRequest(templateError, 'template', 'invalid_template'));
    const params = input.params ?? {};
    try {
      // The engine names any bad sampling param now, rather than in every job later.
      const engine = await this.shard.engine();
      engine.resolve({ ...params, prompt: 'x' });
      // The hook's `model` naming a LoRA adapter: refused now (404 unknown, 400 bad) rather than in every job.
      if (params.adapter !== undefined) await engine.loadAdapter(params.adapter);
    } catch (err) {
      if (!(err instanceof InvalidRequestError)) return fail(this.shard.unavailable(err));
      const e = fromEngineError(err);
      return fail(e.param === 'model' ? e : { ...e, param: e.param && `params.${e.param}` });
    }
    const config = { template: input.template, callback_url: url.url.href, secret: input.secret, params };
    // Again after the await above, so puts that waited on the model load together do not all pass one count.
    const after = full();
    if (after) return fail(after);
    const put = this.hooks.put(tenant, name, { ...config, mode: input.mode ?? 'chat' }, id, create);
    if (!put) return fail(notFound(`no hook '${name}'`, 'hook_not_found'));
    return ok({ hook: await ownView(put.hook), created: put.created });
  }

  async getHook(tenant: Tenant, name: string): Promise<RpcResult<OwnHookView>> {
    const hook = this.hooks.find(tenant, name);
    return hook ? ok(await ownView(hook)) : fail(notFound(`no hook '${name}'`, 'hook_not_found'));
  }

  deleteHook(tenant: Tenant, name: string): RpcResult<{ name: string; object: 'hook'; deleted: true }> {
    return this.hooks.delete(tenant, name)
      ? ok({ name, object: 'hook', deleted: true })
      : fail(notFound(`no hook '${name}'`, 'hook_not_found'));
  }

  /**
   * An inbound event. 401 unless signed with the hook's secret within ±5 minutes of our clock (over the
   * bytes as they arrived), and unless the hook's key is still configured; a webhook-id seen before
   * answers its earlier job; otherwise the template is rendered over the event, the queue, the owner's
   * cap on unfinished jobs and its rate limits (`admit`) are asked, and a job is queued under `jobId`.
   */
  async receive(
    address: HookAddress,
    headers: Record<string, string>,
    body: Uint8Array,
    jobId: string,
    admit: Admit,
  ): Promise<RpcResult<AcceptedEvent>> {
    const hook = this.addressed(address);
    if (!hook) return fail(notFound(`no hook '${'id' in address ? address.id : address.name}'`, 'hook_not_found'));
    const name = hook.name;
    let webhookId: string;
    try {
      webhookId = await (await WebhookSigner.fromSecret(hook.secret)).verify(headers, body);
    } catch (err) {
      if (!(err instanceof WebhookVerificationError)) throw err;
      return fail({ status: 401, type: 'invalid_request_error', message: err.message, param: null, code: err.reason });
    }
    if (!(await this.keyIsLive(hook.owner)))
      return fail({
        status: 401,
        type: 'invalid_request_error',
        message: "this hook's API key is no longer configured: its events are refused",
        param: null,
        code: 'key_revoked',
      });
    const seen = this.jobs.byWebhookId(hook.owner, name, webhookId);
    if (seen) return ok({ job_id: seen.id, status: seen.status, duplicate: true });

    let event: unknown;
    try {
      event = readJsonText(new TextDecoder('utf-8', { fatal: true }).decode(body));
    } catch (err) {
      return fail(invalidRequest(`the event body must be JSON: ${(err as Error).message}`, null, 'invalid_json'));
    }
    const busy = this.refusedForLoad(hook);
    if (busy) return fail(busy);
    let prompt: string;
    try {
      prompt = renderHookTemplate(hook.template, event, name);
    } catch (err) {
      return fail(invalidRequest((err as Error).message, 'template', 'template_render_failed'));
    }
    const admitted = admit(hook.key_name ?? ANONYMOUS_NAME);
    if (!admitted.ok) return admitted;
    const { ticket, state } = admitted.value;
    this.jobs.prune();
    const job = this.jobs.create({
      id: jobId,
      hook: name,
      hookId: hook.id,
      owner: hook.owner,
      keyName: hook.key_name,
      webhookId,
      prompt,
      mode: hook.mode,
      params: hook.params,
    });
    // The watchdog alarm is set before we answer, so the job survives this object stopping right after.
    await this.dispatcher.reschedule().catch((err: unknown) => {
      ticket.settle(0);
      throw err;
    });
    this.dispatcher.start(job.id, ticket);
    return ok({ job_id: job.id, status: job.status, duplicate: false, rateLimit: state });
  }

  /**
   * Whether the shard can take another job of the hook's owner: its queue share (a job is one request
   * among the owner's others) and its cap on unfinished jobs. A 429 with a retry-after, else undefined.
   */
  private refusedForLoad(hook: Hook): ServiceError | undefined {
    const engine = this.shard.loadedEngine();
    const sequences = typeof hook.params.n === 'number' ? hook.params.n : 1;
    const full = engine && queueRefusal(engine, this.limits.maxQueue, hook.owner, sequences);
    if (full) return full;
    const unfinished = this.jobs.unfinishedOf(hook.owner);
    if (unfinished < this.limits.maxJobsPerKey) return undefined;
    return {
      status: 429,
      type: 'rate_limit_error',
      message: `this key has ${unfinished} unfinished webhook jobs on this shard, its limit (MAX_JOBS_PER_KEY ${this.limits.maxJobsPerKey}); retry when they finish`,
      param: null,
      code: 'too_many_jobs',
      rateLimit: {
        requests: { limit: this.limits.maxJobsPerKey, remaining: 0, resetMs: 1000 },
        retryAfterMs: 1000,
      },
    };
  }

  job(id: string, tenant: Tenant): RpcResult<JobView> {
    const job = this.jobs.getFor(id, tenant);
    return job ? ok(jobView(job)) : fail(notFound(`no job '${id}'`, 'job_not_found'));
  }

  private addressed(address: HookAddress): Hook | undefined {
    return 'id' in address ? this.hooks.byId(address.id) : this.hooks.byName(address.name, address.owners);
  }
}

/**
 * The webhooks side of a shard, as the object's RPC methods need it: hook configuration, inbound events
 * (verified per Standard Webhooks, deduplicated by webhook-id, rendered into a job) and job status.
 */
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

export class Webhooks {
  constructor(
    private readonly shard: ShardContext,
    private readonly hooks: HookStore,
    private readonly jobs: JobStore,
    readonly dispatcher: WebhookDispatcher,
    private readonly urls: CallbackUrlPolicy,
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
  ): Promise<RpcResult<{ hook: HookView; created: boolean }>> {
    const secret = parseSecret(input.secret);
    if ('error' in secret) return fail(invalidRequest(secret.error, 'secret'));
    const url = checkCallbackUrl(input.callback_url, this.urls);
    if (!url.ok) return fail(invalidRequest(url.reason, 'callback_url', 'invalid_callback_url'));
    const templateError = checkTemplate(input.template);
    if (templateError) return fail(invalidRequest(templateError, 'template', 'invalid_template'));
    const params = input.params ?? {};
    try {
      // The engine names any bad sampling param now, rather than in every job later.
      (await this.shard.engine()).resolve({ ...params, prompt: 'x' });
    } catch (err) {
      const e = fromEngineError(err);
      return fail({ ...e, param: e.param && `params.${e.param}` });
    }
    const config = { template: input.template, callback_url: url.url.href, secret: input.secret, params };
    const put = this.hooks.put(tenant, name, { ...config, mode: input.mode ?? 'chat' }, id, create);
    if (!put) return fail(notFound(`no hook '${name}'`, 'hook_not_found'));
    return ok({ hook: hookView(put.hook), created: put.created });
  }

  getHook(tenant: Tenant, name: string): RpcResult<HookView> {
    const hook = this.hooks.find(tenant, name);
    return hook ? ok(hookView(hook)) : fail(notFound(`no hook '${name}'`, 'hook_not_found'));
  }

  deleteHook(tenant: Tenant, name: string): RpcResult<{ name: string; object: 'hook'; deleted: true }> {
    return this.hooks.delete(tenant, name)
      ? ok({ name, object: 'hook', deleted: true })
      : fail(notFound(`no hook '${name}'`, 'hook_not_found'));
  }

  /**
   * An inbound event. 401 unless signed with the hook's secret within ±5 minutes of our clock; a
   * webhook-id seen before answers its earlier job; otherwise the template is rendered over the event,
   * the hook owner's rate limits are asked (`admit`), and a job is queued under `jobId` and started.
   */
  async receive(
    address: HookAddress,
    headers: Record<string, string>,
    body: string,
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
    const seen = this.jobs.byWebhookId(hook.owner, name, webhookId);
    if (seen) return ok({ job_id: seen.id, status: seen.status, duplicate: true });

    let event: unknown;
    try {
      event = JSON.parse(body);
    } catch {
      return fail(invalidRequest('the event body must be JSON', null, 'invalid_json'));
    }
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

  job(id: string, tenant: Tenant): RpcResult<JobView> {
    const job = this.jobs.getFor(id, tenant);
    return job ? ok(jobView(job)) : fail(notFound(`no job '${id}'`, 'job_not_found'));
  }

  private addressed(address: HookAddress): Hook | undefined {
    return 'id' in address ? this.hooks.byId(address.id) : this.hooks.byName(address.name, address.owners);
  }
}

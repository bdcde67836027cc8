/**
 * The webhooks side of a shard, as the object's RPC methods need it: hook configuration, inbound events
 * (verified per Standard Webhooks, deduplicated by webhook-id, rendered into a job) and job status.
 */
import type { JobStore, JobView } from '../jobs.js';
import { jobView } from '../jobs.js';
import { fail, fromEngineError, invalidRequest, ok, type RpcResult, type ServiceError } from '../rpc-error.js';
import type { SamplingFields } from '../sessions.js';
import type { ShardContext } from '../shard-context.js';
import { checkCallbackUrl, type CallbackUrlPolicy } from './callback-url.js';
import type { WebhookDispatcher } from './dispatcher.js';
import { checkTemplate, renderHookTemplate } from './hook-template.js';
import { hookView, type HookMode, type HookStore, type HookView } from './hooks.js';
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
}

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

  /** Creates or replaces a hook after checking its secret, callback URL, template and params. */
  async putHook(name: string, input: HookInput): Promise<RpcResult<{ hook: HookView; created: boolean }>> {
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
    const { hook, created } = this.hooks.put(name, {
      template: input.template,
      callback_url: url.url.href,
      secret: input.secret,
      params,
      mode: input.mode ?? 'chat',
    });
    return ok({ hook: hookView(hook), created });
  }

  getHook(name: string): RpcResult<HookView> {
    const hook = this.hooks.get(name);
    return hook ? ok(hookView(hook)) : fail(notFound(`no hook '${name}'`, 'hook_not_found'));
  }

  deleteHook(name: string): RpcResult<{ name: string; object: 'hook'; deleted: true }> {
    return this.hooks.delete(name)
      ? ok({ name, object: 'hook', deleted: true })
      : fail(notFound(`no hook '${name}'`, 'hook_not_found'));
  }

  /**
   * An inbound event. 401 unless signed with the hook's secret within ±5 minutes of our clock; a
   * webhook-id seen before answers its earlier job; otherwise the template is rendered over the event
   * and a job is queued under `jobId` and started.
   */
  async receive(
    name: string,
    headers: Record<string, string>,
    body: string,
    jobId: string,
  ): Promise<RpcResult<AcceptedEvent>> {
    const hook = this.hooks.get(name);
    if (!hook) return fail(notFound(`no hook '${name}'`, 'hook_not_found'));
    let webhookId: string;
    try {
      webhookId = await (await WebhookSigner.fromSecret(hook.secret)).verify(headers, body);
    } catch (err) {
      if (!(err instanceof WebhookVerificationError)) throw err;
      return fail({ status: 401, type: 'invalid_request_error', message: err.message, param: null, code: err.reason });
    }
    const seen = this.jobs.byWebhookId(name, webhookId);
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
    this.jobs.prune();
    const job = this.jobs.create({ id: jobId, hook: name, webhookId, prompt, mode: hook.mode, params: hook.params });
    // The watchdog alarm is set before we answer, so the job survives this object stopping right after.
    await this.dispatcher.reschedule();
    this.dispatcher.start(job.id);
    return ok({ job_id: job.id, status: job.status, duplicate: false });
  }

  job(id: string): RpcResult<JobView> {
    const job = this.jobs.get(id);
    return job ? ok(jobView(job)) : fail(notFound(`no job '${id}'`, 'job_not_found'));
  }
}

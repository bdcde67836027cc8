/**
 * Runs jobs and delivers their results. A job generates as soon as it is accepted, then its result is
 * POSTed to the hook's callback, signed with the hook's secret; failed attempts are retried from the
 * object's alarm with exponential backoff and jitter, at most `maxAttempts` times. Each state change is
 * written before it is acted on, and the alarm also serves as a watchdog: a job left queued or running
 * by an object that stopped is generated again when the alarm next fires.
 */
import { InvalidRequestError } from '../../engine/errors.js';
import type { GenerationRequest } from '../../engine/request.js';
import type { DoneEvent } from '../../engine/sequence-output.js';
import type { Job, JobError, JobOutput, JobStore } from '../jobs.js';
import type { ShardContext } from '../shard-context.js';
import type { Ticket } from '../tenancy/rate-limiter.js';
import { ANONYMOUS_NAME } from '../tenancy/tenant.js';
import { retryDelayMs, type RetryPolicy } from './backoff.js';
import { checkCallbackUrl, type CallbackUrlPolicy } from './callback-url.js';
import { deliver } from './delivery.js';
import type { HookStore } from './hooks.js';
import { WebhookSigner } from './standard-webhooks.js';
import { deliverySecret } from './delivery-key.js';
import { constrainAfterReasoning } from '../template-reasoning.js';
import { loadRequestsAdapter } from '../generation-run.js';
import type { KeyIsLive } from '../tenancy/live-keys.js';

/** How long a generation may look stalled before the alarm assumes its object stopped and reruns it. */
export const WATCHDOG_MS = 60_000;

export interface AlarmScheduler {
  getAlarm(): Promise<number | null>;
  setAlarm(at: number): Promise<void>;
  deleteAlarm(): Promise<void>;
}

export type DeliveryPayload =
  | { type: 'generation.completed'; job_id: string; hook: string; output: JobOutput }
  | { type: 'generation.failed'; job_id: string; hook: string; error: JobError };

export class WebhookDispatcher {
  /** Jobs this instance is generating or delivering right now (so the alarm does not start them twice). */
  private readonly generating = new Set<string>();
  private readonly delivering = new Set<string>();

  constructor(
    private readonly shard: ShardContext,
    private readonly hooks: HookStore,
    private readonly jobs: JobStore,
    private readonly alarms: AlarmScheduler,
    private readonly retry: RetryPolicy,
    private readonly urls: CallbackUrlPolicy,
    /** Whether a job's key is still configured: a removed key's jobs stop (live-keys.ts). */
    private readonly keyIsLive: KeyIsLive = async () => true,
  ) {}

  /** Stops `job` when its key is gone; true if it was stopped. */
  private async stoppedForKey(job: Job): Promise<boolean> {
    if (await this.keyIsLive(job.owner)) return false;
    this.jobs.stopped(job.id, {
      message: "the hook's API key is no longer configured; the job was stopped",
      code: 'key_revoked',
    });
    return true;
  }

  /**
   * Starts an accepted job in the background; the alarm picks it up if this object stops first. `ticket`
   * is its key's rate-limit admission, settled with the tokens it generates.
   */
  start(jobId: string, ticket?: Ticket): void {
    void this.run(jobId, ticket).catch((err: unknown) => {
      ticket?.settle(0);
      console.error('webhook job', jobId, err);
    });
  }

  /** The alarm: generate orphaned jobs, make due delivery attempts, then set the alarm for what is next. */
  async onAlarm(): Promise<void> {
    const work: Promise<void>[] = [];
    for (const job of this.jobs.unfinished()) if (!this.generating.has(job.id)) work.push(this.run(job.id));
    for (const job of this.jobs.dueDeliveries(Date.now()))
      if (!this.delivering.has(job.id)) work.push(this.attempt(job.id));
    await Promise.allSettled(work);
    await this.reschedule();
  }

  /** Jobs the alarm reruns have no ticket: their tokens are charged to their key all the same. */
  private async run(jobId: string, ticket?: Ticket): Promise<void> {
    if (this.generating.has(jobId)) return ticket?.settle(0);
    this.generating.add(jobId);
    let tokens = 0;
    try {
      const job = this.jobs.get(jobId);
      if (!job || (job.status !== 'queued' && job.status !== 'running')) return;
      if (await this.stoppedForKey(job)) return;
      this.jobs.running(jobId);
      await this.reschedule();
      const outcome = await this.generate(job);
      tokens = 'result' in outcome ? outcome.result.usage.completion_tokens : 0;
      this.jobs.generated(jobId, outcome);
      if (!ticket) this.shard.limiter.charge(job.keyName ?? ANONYMOUS_NAME, tokens);
    } finally {
      this.generating.delete(jobId);
      ticket?.settle(tokens);
    }
    await this.attempt(jobId);
    await this.reschedule();
  }

  private async generate(job: Job): Promise<{ result: JobOutput } | { error: JobError }> {
    const request: GenerationRequest =
      job.mode === 'chat'
        ? { ...job.params, messages: [{ role: 'user', content: job.prompt }] }
        : { ...job.params, prompt: job.prompt };
    let done: DoneEvent | undefined;
    try {
      const engine = await this.shard.engine();
      // Jobs queue among their owner's other requests, fairly against other owners'.
      const adapter = await loadRequestsAdapter(engine, [request]);
      for await (const event of engine.generate(constrainAfterReasoning(engine, request), {
        adapter,
        fairnessGroup: job.owner,
        cacheSalt: this.shard.cacheSalt(job.owner),
      }))
        if (event.type === 'done') done = event;
    } catch (err) {
      if (err instanceof InvalidRequestError)
        return { error: { message: err.message, code: err.code, param: err.param } };
      return {
        error: {
          message: `generation failed: ${err instanceof Error ? err.message : String(err)}`,
          code: 'generation_failed',
        },
      };
    }
    if (!done) return { error: { message: 'generation ended without a result', code: 'generation_failed' } };
    this.shard.metrics.finished(done, true, job.keyName ?? ANONYMOUS_NAME);
    const m = done.metrics;
    return {
      result: {
        text: done.text,
        finish_reason: done.finishReason,
        usage: {
          prompt_tokens: m.promptTokens,
          completion_tokens: m.completionTokens,
          total_tokens: m.promptTokens + m.completionTokens,
          prompt_tokens_details: { cached_tokens: m.cachedTokens },
        },
      },
    };
  }

  /** One delivery attempt, counted before it is made; schedules the retry or fails the job. */
  private async attempt(jobId: string): Promise<void> {
    if (this.delivering.has(jobId)) return;
    this.delivering.add(jobId);
    try {
      const job = this.jobs.get(jobId);
      if (job?.status !== 'delivering') return;
      if (await this.stoppedForKey(job)) return;
      const hook = this.hooks.row(job.owner, job.hook);
      if (!hook) return this.jobs.attemptFailed(jobId, `hook '${job.hook}' was deleted`, null);
      // Checked again at delivery: the policy may have tightened since the hook was configured.
      const url = checkCallbackUrl(hook.callback_url, this.urls);
      if (!url.ok) return this.jobs.attemptFailed(jobId, url.reason, null);

      const attempts = this.jobs.attemptStarted(jobId);
      // Signed with the delivery secret, never the inbound one: a delivery is no valid event for any hook.
      const signer = await WebhookSigner.fromSecret(await deliverySecret(hook.secret));
      const outcome = await deliver(url.url.href, job.id, JSON.stringify(payload(job)), signer);
      if (outcome.ok) return this.jobs.delivered(jobId);
      const retryAt = attempts >= this.retry.maxAttempts ? null : Date.now() + retryDelayMs(attempts, this.retry);
      this.jobs.attemptFailed(jobId, outcome.error ?? 'delivery failed', retryAt);
    } finally {
      this.delivering.delete(jobId);
    }
  }

  /**
   * Sets the alarm for the earliest pending delivery, or the watchdog while a job generates. The alarm is
   * this module's alone; with nothing pending it is cleared.
   */
  async reschedule(): Promise<void> {
    const candidates: number[] = [];
    const next = this.jobs.nextAttemptAt();
    if (next !== null) candidates.push(next);
    if (this.jobs.unfinished().length > 0) candidates.push(Date.now() + WATCHDOG_MS);
    const current = await this.alarms.getAlarm();
    if (candidates.length === 0) {
      if (current !== null) await this.alarms.deleteAlarm();
      return;
    }
    const wanted = Math.min(...candidates);
    // An alarm set sooner is kept: when it fires with nothing due, it sets the next one. One whose time
    // has passed is not kept: storage can hold a past alarm workerd never fires (the server stopped while
    // an alarm ran), and keeping it stalled every retry on the shard for good.
    if (current === null || wanted < current || current <= Date.now()) {
      await this.alarms.setAlarm(wanted);
    }
  }
}

function payload(job: Job): DeliveryPayload {
  return job.result
    ? { type: 'generation.completed', job_id: job.id, hook: job.hook, output: job.result }
    : {
        type: 'generation.failed',
        job_id: job.id,
        hook: job.hook,
        error: job.error ?? { message: 'no result', code: null },
      };
}

/**
 * Jobs: one per accepted webhook event. A job's life is queued → running (generating) → delivering
 * (POSTing the result to the hook's callback, retried) → delivered | failed. Every change is written to
 * the object's SQLite before anything acts on it, so a restart resumes each job where it was.
 */
import type { SamplingFields } from './sessions.js';
import type { HookMode } from './webhooks/hooks.js';
import { createOrRebuild } from './tenancy/migrations.js';
import { owns, type Tenant } from './tenancy/tenant.js';

export type JobStatus = 'queued' | 'running' | 'delivering' | 'delivered' | 'failed';

export interface JobUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** What the generation gave: the callback's `output`. */
export interface JobOutput {
  text: string;
  finish_reason: string;
  usage: JobUsage;
}

/** Why a generation could not run (e.g. the rendered prompt is longer than the context window). */
export interface JobError {
  message: string;
  code: string | null;
  param?: string | null;
}

export interface Job {
  id: string;
  hook: string;
  /** The hook's path id when the event came (null for jobs of hooks made before ids). */
  hookId: string | null;
  /** The hook's owner, whose job this is (tenant.ts). */
  owner: string;
  /** The name of the key the job's usage is counted under (null: made before keys had names). */
  keyName: string | null;
  webhookId: string;
  /** The rendered template: the user message (mode chat) or the raw prompt (mode completion). */
  prompt: string;
  mode: HookMode;
  params: SamplingFields;
  status: JobStatus;
  /** Delivery attempts made so far. */
  attempts: number;
  result: JobOutput | null;
  error: JobError | null;
  lastError: string | null;
  /** When the next delivery attempt is due (ms), while delivering. */
  nextAttemptAt: number | null;
  createdAt: number;
  updatedAt: number;
}

export interface JobView {
  id: string;
  object: 'job';
  hook: string;
  hook_id: string | null;
  key_name: string | null;
  status: JobStatus;
  attempts: number;
  result?: JobOutput;
  error?: JobError;
  last_error?: string;
  /** Unix seconds of the next delivery attempt, while one is pending. */
  next_attempt_at?: number;
  created_at: number;
  updated_at: number;
}

interface JobRow extends Record<string, SqlStorageValue> {
  id: string;
  hook: string;
  hook_id: string | null;
  owner: string;
  key_name: string | null;
  webhook_id: string;
  prompt: string;
  mode: string;
  params: string;
  status: string;
  attempts: number;
  result: string | null;
  error: string | null;
  last_error: string | null;
  next_attempt_at: number | null;
  created_at: number;
  updated_at: number;
}

/** Finished jobs (and their webhook-ids, which dedupe replays) are kept this long. */
export const JOB_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

const SCHEMA = `CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL DEFAULT '',
  key_name TEXT,
  hook TEXT NOT NULL,
  hook_id TEXT,
  webhook_id TEXT NOT NULL,
  prompt TEXT NOT NULL,
  mode TEXT NOT NULL,
  params TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  result TEXT,
  error TEXT,
  last_error TEXT,
  next_attempt_at INTEGER,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (owner, hook, webhook_id)
)`;

const COLUMNS = [
  'id',
  'owner',
  'key_name',
  'hook',
  'hook_id',
  'webhook_id',
  'prompt',
  'mode',
  'params',
  'status',
  'attempts',
  'result',
  'error',
  'last_error',
  'next_attempt_at',
  'created_at',
  'updated_at',
];

export class JobStore {
  constructor(private readonly sql: SqlStorage) {
    // A webhook-id dedupes per owner and hook: two owners' senders may well use the same ids.
    createOrRebuild(sql, 'jobs', SCHEMA, 'owner', COLUMNS);
    sql.exec('CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, next_attempt_at)');
  }

  create(init: {
    id: string;
    hook: string;
    hookId: string | null;
    owner: string;
    keyName: string | null;
    webhookId: string;
    prompt: string;
    mode: HookMode;
    params: SamplingFields;
  }): Job {
    const now = Date.now();
    this.sql.exec(
      `INSERT INTO jobs (id, owner, key_name, hook, hook_id, webhook_id, prompt, mode, params, status, attempts, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?)`,
      init.id,
      init.owner,
      init.keyName,
      init.hook,
      init.hookId,
      init.webhookId,
      init.prompt,
      init.mode,
      JSON.stringify(init.params),
      now,
      now,
    );
    return this.get(init.id)!;
  }

  get(id: string): Job | undefined {
    const row = this.sql.exec<JobRow>('SELECT * FROM jobs WHERE id = ?', id).toArray()[0];
    return row && fromRow(row);
  }

  /** The job `id` if it is `tenant`'s: another tenant's job is not found, exactly as one that does not exist. */
  getFor(id: string, tenant: Tenant): Job | undefined {
    const job = this.get(id);
    return job && owns(tenant, job.owner) ? job : undefined;
  }

  /** The job an earlier delivery of the same event (same owner's hook and webhook-id) created. */
  byWebhookId(owner: string, hook: string, webhookId: string): Job | undefined {
    const row = this.sql
      .exec<JobRow>('SELECT * FROM jobs WHERE owner = ? AND hook = ? AND webhook_id = ?', owner, hook, webhookId)
      .toArray()[0];
    return row && fromRow(row);
  }

  /** Jobs whose generation has not finished: queued, or running when the object last stopped. */
  unfinished(): Job[] {
    return this.sql
      .exec<JobRow>("SELECT * FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at")
      .toArray()
      .map(fromRow);
  }

  /** How many of `owner`'s jobs have not finished generating (queued or running): what MAX_JOBS_PER_KEY caps. */
  unfinishedOf(owner: string): number {
    const row = this.sql
      .exec<{ n: number }>("SELECT COUNT(*) AS n FROM jobs WHERE owner = ? AND status IN ('queued', 'running')", owner)
      .toArray()[0];
    return row?.n ?? 0;
  }

  /** Ends a job where it stands, undelivered (its key was removed): nothing more runs or is sent for it. */
  stopped(id: string, error: JobError): void {
    this.update(id, {
      status: 'failed',
      error: JSON.stringify(error),
      next_attempt_at: null,
      last_error: error.message,
    });
  }

  /** Jobs whose next delivery attempt is due. */
  dueDeliveries(now: number): Job[] {
    return this.sql
      .exec<JobRow>(
        "SELECT * FROM jobs WHERE status = 'delivering' AND next_attempt_at <= ? ORDER BY next_attempt_at",
        now,
      )
      .toArray()
      .map(fromRow);
  }

  /** The earliest pending delivery attempt, if any. */
  nextAttemptAt(): number | null {
    const row = this.sql
      .exec<{ at: number | null }>("SELECT MIN(next_attempt_at) AS at FROM jobs WHERE status = 'delivering'")
      .toArray()[0];
    return row?.at ?? null;
  }

  running(id: string): void {
    this.update(id, { status: 'running' });
  }

  /** Generation over: the result (or why there is none) is stored and the first delivery is due now. */
  generated(id: string, outcome: { result: JobOutput } | { error: JobError }): void {
    this.update(id, {
      status: 'delivering',
      result: 'result' in outcome ? JSON.stringify(outcome.result) : null,
      error: 'error' in outcome ? JSON.stringify(outcome.error) : null,
      next_attempt_at: Date.now(),
    });
  }

  /** Counts an attempt before it is made, so one cut short by a restart is not forgotten. */
  attemptStarted(id: string): number {
    this.sql.exec('UPDATE jobs SET attempts = attempts + 1, updated_at = ? WHERE id = ?', Date.now(), id);
    return this.get(id)!.attempts;
  }

  delivered(id: string): void {
    this.update(id, { status: 'delivered', next_attempt_at: null, last_error: null });
  }

  /** A failed attempt: retried at `retryAt`, or the job fails when there is none. */
  attemptFailed(id: string, error: string, retryAt: number | null): void {
    this.update(id, {
      status: retryAt === null ? 'failed' : 'delivering',
      next_attempt_at: retryAt,
      last_error: error,
    });
  }

  /** Forgets finished jobs older than the retention period. */
  prune(now = Date.now()): void {
    this.sql.exec(
      "DELETE FROM jobs WHERE status IN ('delivered', 'failed') AND updated_at < ?",
      now - JOB_RETENTION_MS,
    );
  }

  private update(id: string, fields: Partial<Record<keyof JobRow, SqlStorageValue>>): void {
    const entries = Object.entries({ ...fields, updated_at: Date.now() });
    this.sql.exec(
      `UPDATE jobs SET ${entries.map(([k]) => `${k} = ?`).join(', ')} WHERE id = ?`,
      ...entries.map(([, v]) => v),
      id,
    );
  }
}

function fromRow(row: JobRow): Job {
  return {
    id: row.id,
    hook: row.hook,
    hookId: row.hook_id,
    owner: row.owner,
    keyName: row.key_name,
    webhookId: row.webhook_id,
    prompt: row.prompt,
    mode: row.mode as HookMode,
    params: JSON.parse(row.params) as SamplingFields,
    status: row.status as JobStatus,
    attempts: row.attempts,
    result: row.result === null ? null : (JSON.parse(row.result) as JobOutput),
    error: row.error === null ? null : (JSON.parse(row.error) as JobError),
    lastError: row.last_error,
    nextAttemptAt: row.next_attempt_at,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export function jobView(job: Job): JobView {
  const view: JobView = {
    id: job.id,
    object: 'job',
    hook: job.hook,
    hook_id: job.hookId,
    key_name: job.keyName,
    status: job.status,
    attempts: job.attempts,
    created_at: Math.floor(job.createdAt / 1000),
    updated_at: Math.floor(job.updatedAt / 1000),
  };
  if (job.result) view.result = job.result;
  if (job.error) view.error = job.error;
  if (job.lastError) view.last_error = job.lastError;
  if (job.status === 'delivering' && job.nextAttemptAt !== null)
    view.next_attempt_at = Math.floor(job.nextAttemptAt / 1000);
  return view;
}

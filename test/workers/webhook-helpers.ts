// Signing inbound events and talking to the Node test receiver (webhook-receiver.ts) from inside workerd.
import { inject } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { call, post } from './service-helpers.js';

export const newSecret = (): string =>
  `whsec_${btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))}`;

let counter = 0;
/** A fresh receiver inbox: deliveries to `url` are checked with `secret`; the first `fail` answer 503 (-1: all). */
export async function inbox(secret: string, fail = 0): Promise<{ url: string; deliveries(): Promise<Delivery[]> }> {
  const key = `inbox-${Date.now()}-${++counter}`;
  const base = inject('webhookReceiver');
  await fetch(`${base}/control/${key}`, { method: 'POST', body: JSON.stringify({ secret, fail }) });
  return {
    url: `${base}/deliver/${key}`,
    deliveries: async () =>
      ((await (await fetch(`${base}/control/${key}`)).json()) as { deliveries: Delivery[] }).deliveries,
  };
}

export interface Delivery {
  headers: Record<string, string>;
  body: string;
  verified: boolean;
  inboundValid: boolean;
  status: number;
  at: number;
}

/** POSTs an event to a hook, signed per Standard Webhooks (by the reference package), at `when`. */
export function sendEvent(
  name: string,
  secret: string,
  event: unknown,
  { id = `msg_${crypto.randomUUID()}`, when = new Date() } = {},
): Promise<Response> {
  const body = JSON.stringify(event);
  const headers = {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(+when / 1000)),
    'webhook-signature': new Webhook(secret).sign(id, when, body),
  };
  return post(`/v1/hooks/${name}`, body, headers);
}

export function putHook(name: string, config: Record<string, unknown>): Promise<Response> {
  return call(`/v1/hooks/${name}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(config),
  });
}

export interface JobBody {
  id: string;
  status: string;
  attempts: number;
  hook: string;
  result?: { text: string; finish_reason: string; usage: { prompt_tokens: number; completion_tokens: number } };
  error?: { message: string; code: string };
  last_error?: string;
}

export async function getJob(id: string): Promise<JobBody> {
  const res = await call(`/v1/jobs/${id}`);
  if (res.status !== 200) throw new Error(`GET /v1/jobs/${id}: ${res.status} ${await res.text()}`);
  return (await res.json()) as JobBody;
}

/** Polls a job until it is delivered or failed. */
export async function settled(id: string, timeoutMs = 20_000): Promise<JobBody> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const job = await getJob(id);
    if (job.status === 'delivered' || job.status === 'failed') return job;
    if (Date.now() > end)
      throw new Error(`job ${id} still ${job.status} after ${timeoutMs} ms (attempts ${job.attempts})`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

let hookCounter = 0;
export const hookName = (prefix = 'hook'): string => `${prefix}-${Date.now().toString(36)}-${++hookCounter}`;

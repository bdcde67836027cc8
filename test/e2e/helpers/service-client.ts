// What the e2e suites say to a `wrangler dev` server and to the loopback webhook receiver: keyed API
// calls, signed inbound events, receiver inboxes and settled jobs, written once for every suite.
import { Webhook } from 'standardwebhooks';
import { expect } from 'vitest';
import type { ReceivedDelivery } from '../../helpers/webhook-receiver.js';

export const hookSecret = (): string =>
  `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`;

export function api(base: string, key: string, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** The body of `res`, after checking its status (the body is the assertion's message). */
export async function json<T = Record<string, unknown>>(res: Response, status = 200): Promise<T> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  return JSON.parse(text) as T;
}

/** An event signed as a Standard Webhooks sender signs it, POSTed to the hook `ref` (its id or name). */
export function sendEvent(
  base: string,
  ref: string,
  secret: string,
  event: unknown,
  { id = `msg_${crypto.randomUUID()}`, when = new Date(), tamper = false } = {},
): Promise<Response> {
  const body = JSON.stringify(event);
  const signature = new Webhook(secret).sign(id, when, tamper ? `${body} ` : body);
  return fetch(`${base}/v1/hooks/${ref}`, {
    method: 'POST',
    headers: {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(+when / 1000)),
      'webhook-signature': signature,
    },
    body,
  });
}

export interface Inbox {
  url: string;
  deliveries(): Promise<ReceivedDelivery[]>;
}

/**
 * A receiver inbox checking signatures with the hook's `secret`; it fails the first `fail` deliveries
 * (-1: all) and then leaves `hold` unanswered.
 */
export async function inbox(
  receiver: string,
  key: string,
  secret: string,
  { fail = 0, hold = 0 } = {},
): Promise<Inbox> {
  await fetch(`${receiver}/control/${key}`, { method: 'POST', body: JSON.stringify({ secret, fail, hold }) });
  return {
    url: `${receiver}/deliver/${key}`,
    deliveries: async () =>
      ((await (await fetch(`${receiver}/control/${key}`)).json()) as { deliveries: ReceivedDelivery[] }).deliveries,
  };
}

/** Polls until `check` holds (or throws after `ms`, naming `what`). */
export async function until<T>(
  what: string,
  probe: () => Promise<T>,
  check: (v: T) => boolean,
  ms = 30_000,
): Promise<T> {
  for (const end = Date.now() + ms; ; ) {
    const value = await probe();
    if (check(value)) return value;
    if (Date.now() > end) throw new Error(`${what}: still ${JSON.stringify(value).slice(0, 300)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

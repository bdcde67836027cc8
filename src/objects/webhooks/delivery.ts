/**
 * One delivery attempt of a signed event to a callback URL. The message id (`webhook-id`) stays the same
 * across retries so the receiver can drop duplicates; the timestamp and signature are fresh each time.
 * Redirects are not followed: a redirect could lead to an address the URL check refused.
 */
import type { WebhookSigner } from './standard-webhooks.js';

export interface DeliveryOutcome {
  ok: boolean;
  /** HTTP status, when the receiver answered. */
  status?: number;
  /** Why it failed, for the job's last_error. */
  error?: string;
}

export const DELIVERY_TIMEOUT_MS = 15_000;

export async function deliver(
  url: string,
  messageId: string,
  body: string,
  signer: WebhookSigner,
  { timeoutMs = DELIVERY_TIMEOUT_MS, userAgent = 'edge-infer-webhooks/1' } = {},
): Promise<DeliveryOutcome> {
  const headers = {
    ...(await signer.headers(messageId, body)),
    'content-type': 'application/json',
    'user-agent': userAgent,
  };
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers,
      body,
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
    // The body is not needed, but must be consumed or cancelled to free the connection.
    await res.body?.cancel();
    if (res.status >= 200 && res.status < 300) return { ok: true, status: res.status };
    return { ok: false, status: res.status, error: `callback answered HTTP ${res.status}` };
  } catch (err) {
    const name = err instanceof Error ? err.name : '';
    const error =
      name === 'TimeoutError'
        ? `callback did not answer within ${timeoutMs} ms`
        : `callback unreachable: ${String(err instanceof Error ? err.message : err)}`;
    return { ok: false, error };
  }
}

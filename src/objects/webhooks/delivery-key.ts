/**
 * The secret deliveries are signed with: not the hook's own secret, but one derived from it, so that a
 * delivery is never a valid inbound event for any hook. A hook whose callback_url led back to this service
 * (or to another hook with the same secret) would otherwise see each delivery accepted as a new event, and
 * its jobs would call themselves for ever (607-1,081 jobs in 15 s, measured before this).
 *
 *   delivery key = HMAC-SHA256(key of the hook's secret, "edge-infer webhook delivery v1")   (32 bytes)
 *   delivery_secret = "whsec_" + base64(delivery key)
 *
 * The hook's PUT and GET answer `delivery_secret`; receivers verify deliveries with it, with any Standard
 * Webhooks library (docs/sessions-webhooks.md). One inbound secret gives one delivery secret, so nothing
 * new is stored and a secret rotated by PUT rotates both.
 */
import { base64Encode, parseSecret, SECRET_PREFIX } from './standard-webhooks.js';

const LABEL = new TextEncoder().encode('edge-infer webhook delivery v1');

export async function deliverySecret(secret: string): Promise<string> {
  const parsed = parseSecret(secret);
  if ('error' in parsed) throw new TypeError(parsed.error);
  const key = await crypto.subtle.importKey('raw', parsed.key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return SECRET_PREFIX + base64Encode(new Uint8Array(await crypto.subtle.sign('HMAC', key, LABEL)));
}

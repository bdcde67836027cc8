/**
 * Standard Webhooks (https://www.standardwebhooks.com) signing and verification on WebCrypto, so the same
 * code runs in workerd and Node. A message is signed as HMAC-SHA256(key, `${id}.${timestamp}.${body}`),
 * sent as `webhook-signature: v1,<base64>`; the key is the base64 part of a `whsec_...` secret.
 */

export const SECRET_PREFIX = 'whsec_';
/** The spec asks for keys of 24 to 64 bytes. */
const MIN_KEY_BYTES = 24;
const MAX_KEY_BYTES = 64;
/** How far a timestamp may be from our clock, either way (the spec's recommendation). */
export const TIMESTAMP_TOLERANCE_S = 5 * 60;

export interface WebhookHeaders {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
}

/** Why an inbound message was refused; `reason` is a stable machine-readable code. */
export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';
  constructor(
    readonly reason: 'missing_headers' | 'invalid_timestamp' | 'timestamp_out_of_range' | 'invalid_signature',
    message: string,
  ) {
    super(message);
  }
}

/** The raw key of a `whsec_` secret, or an error message saying what is wrong with it. */
export function parseSecret(secret: unknown): { key: Uint8Array<ArrayBuffer> } | { error: string } {
  if (typeof secret !== 'string' || !secret.startsWith(SECRET_PREFIX)) {
    return { error: `secret must be a string '${SECRET_PREFIX}<base64 key>'` };
  }
  let key: Uint8Array<ArrayBuffer>;
  try {
    key = base64Decode(secret.slice(SECRET_PREFIX.length));
  } catch {
    return { error: `the part of secret after '${SECRET_PREFIX}' must be base64` };
  }
  if (key.length < MIN_KEY_BYTES || key.length > MAX_KEY_BYTES) {
    return { error: `secret key must be ${MIN_KEY_BYTES} to ${MAX_KEY_BYTES} bytes (it is ${key.length})` };
  }
  return { key };
}

/** A fresh `whsec_` secret with a 32-byte random key. */
export function generateSecret(): string {
  return SECRET_PREFIX + base64Encode(crypto.getRandomValues(new Uint8Array(32)));
}

/** Signs and verifies messages with one secret. */
export class WebhookSigner {
  private constructor(private readonly key: CryptoKey) {}

  static async fromSecret(secret: string): Promise<WebhookSigner> {
    const parsed = parseSecret(secret);
    if ('error' in parsed) throw new TypeError(parsed.error);
    const key = await crypto.subtle.importKey('raw', parsed.key, { name: 'HMAC', hash: 'SHA-256' }, false, [
      'sign',
      'verify',
    ]);
    return new WebhookSigner(key);
  }

  /** The `webhook-signature` value for a message. */
  async sign(id: string, timestampS: number, body: string): Promise<string> {
    const mac = await crypto.subtle.sign('HMAC', this.key, signedContent(id, timestampS, body));
    return `v1,${base64Encode(new Uint8Array(mac))}`;
  }

  /** The three headers of an outbound message sent now (or at `nowMs`). */
  async headers(id: string, body: string, nowMs = Date.now()): Promise<WebhookHeaders> {
    const timestamp = Math.floor(nowMs / 1000);
    return {
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': await this.sign(id, timestamp, body),
    };
  }

  /**
   * Checks an inbound message: headers present, timestamp within the tolerance, and one of the
   * space-separated `v1,` signatures valid. Throws WebhookVerificationError; returns the message id.
   */
  async verify(
    headers: Headers | Record<string, string | undefined>,
    body: string | Uint8Array,
    nowMs = Date.now(),
  ): Promise<string> {
    const get = (name: string): string | null =>
      headers instanceof Headers ? headers.get(name) : (headers[name] ?? null);
    const id = get('webhook-id');
    const timestamp = get('webhook-timestamp');
    const signatures = get('webhook-signature');
    if (!id || !timestamp || !signatures) {
      throw new WebhookVerificationError(
        'missing_headers',
        'webhook-id, webhook-timestamp and webhook-signature headers are required',
      );
    }
    if (!/^\d{1,12}$/.test(timestamp)) {
      throw new WebhookVerificationError('invalid_timestamp', 'webhook-timestamp must be integer unix seconds');
    }
    const ts = Number(timestamp);
    if (Math.abs(nowMs / 1000 - ts) > TIMESTAMP_TOLERANCE_S) {
      throw new WebhookVerificationError(
        'timestamp_out_of_range',
        `webhook-timestamp is more than ${TIMESTAMP_TOLERANCE_S} seconds from the server's clock`,
      );
    }
    const content = signedContent(id, ts, body);
    for (const candidate of signatures.split(' ')) {
      const [version, value] = candidate.split(',', 2);
      if (version !== 'v1' || !value) continue;
      let mac: Uint8Array<ArrayBuffer>;
      try {
        mac = base64Decode(value);
      } catch {
        continue;
      }
      // subtle.verify compares in constant time.
      if (await crypto.subtle.verify('HMAC', this.key, mac, content)) return id;
    }
    throw new WebhookVerificationError('invalid_signature', 'no valid v1 signature in webhook-signature');
  }
}

/**
 * The bytes a signature covers. An inbound body is verified as the bytes that arrived (a body that is not
 * valid UTF-8 must not be "repaired" into one the sender never signed), so bytes are joined as bytes.
 */
function signedContent(id: string, timestampS: number, body: string | Uint8Array): Uint8Array<ArrayBuffer> {
  const encoder = new TextEncoder();
  if (typeof body === 'string') return encoder.encode(`${id}.${timestampS}.${body}`) as Uint8Array<ArrayBuffer>;
  const head = encoder.encode(`${id}.${timestampS}.`);
  const out = new Uint8Array(head.length + body.length);
  out.set(head);
  out.set(body, head.length);
  return out;
}

export function base64Encode(bytes: Uint8Array): string {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

/** Strict base64 (standard alphabet, padding optional); throws on anything else. */
export function base64Decode(text: string): Uint8Array<ArrayBuffer> {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 === 1) throw new TypeError('not base64');
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

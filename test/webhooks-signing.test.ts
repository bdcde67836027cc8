// Our WebCrypto signer against the reference `standardwebhooks` package, both ways.
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import {
  WebhookSigner,
  WebhookVerificationError,
  generateSecret,
  parseSecret,
} from '../src/objects/webhooks/standard-webhooks.js';

const secret = `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64')}`;
const body = JSON.stringify({ type: 'x', data: { text: 'héllo ✓' } });

async function reason(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'accepted';
  } catch (err) {
    expect(err).toBeInstanceOf(WebhookVerificationError);
    return (err as WebhookVerificationError).reason;
  }
}

describe('Standard Webhooks signer', () => {
  it('signs exactly as the standardwebhooks package', async () => {
    const ours = await WebhookSigner.fromSecret(secret);
    const ref = new Webhook(secret);
    const at = new Date(1_700_000_000_000);
    expect(await ours.sign('msg_1', 1_700_000_000, body)).toBe(ref.sign('msg_1', at, body));
  });

  it('produces headers the package verifies', async () => {
    const ours = await WebhookSigner.fromSecret(secret);
    const headers = await ours.headers('msg_2', body);
    expect(new Webhook(secret).verify(body, { ...headers })).toEqual(JSON.parse(body));
  });

  it('verifies what the package signs, among several signatures', async () => {
    const ours = await WebhookSigner.fromSecret(secret);
    const now = new Date();
    const sig = new Webhook(secret).sign('msg_3', now, body);
    const other = new Webhook(generateSecret()).sign('msg_3', now, body);
    const headers = {
      'webhook-id': 'msg_3',
      'webhook-timestamp': String(Math.floor(+now / 1000)),
      'webhook-signature': `${other} v1a,xyz ${sig}`,
    };
    expect(await ours.verify(headers, body)).toBe('msg_3');
    expect(await ours.verify(new Headers(headers), body)).toBe('msg_3');
  });

  it('refuses a wrong key, a changed body, a changed id and missing headers', async () => {
    const ours = await WebhookSigner.fromSecret(secret);
    const now = new Date();
    const ts = String(Math.floor(+now / 1000));
    const good = {
      'webhook-id': 'm',
      'webhook-timestamp': ts,
      'webhook-signature': new Webhook(secret).sign('m', now, body),
    };
    expect(await reason(ours.verify(good, `${body} `))).toBe('invalid_signature');
    expect(await reason(ours.verify({ ...good, 'webhook-id': 'n' }, body))).toBe('invalid_signature');
    const wrong = new Webhook(generateSecret()).sign('m', now, body);
    expect(await reason(ours.verify({ ...good, 'webhook-signature': wrong }, body))).toBe('invalid_signature');
    expect(await reason(ours.verify({ ...good, 'webhook-signature': 'v1,!!!' }, body))).toBe('invalid_signature');
    expect(await reason(ours.verify({ ...good, 'webhook-signature': `v2,${wrong.slice(3)}` }, body))).toBe(
      'invalid_signature',
    );
    expect(await reason(ours.verify({ 'webhook-id': 'm', 'webhook-timestamp': ts }, body))).toBe('missing_headers');
  });

  it('refuses timestamps more than five minutes away, either way', async () => {
    const ours = await WebhookSigner.fromSecret(secret);
    const ref = new Webhook(secret);
    const nowMs = Date.now();
    const at = (offsetS: number) => {
      const d = new Date(nowMs + offsetS * 1000);
      return {
        'webhook-id': 'm',
        'webhook-timestamp': String(Math.floor(+d / 1000)),
        'webhook-signature': ref.sign('m', d, body),
      };
    };
    expect(await reason(ours.verify(at(-299), body, nowMs))).toBe('accepted');
    expect(await reason(ours.verify(at(299), body, nowMs))).toBe('accepted');
    expect(await reason(ours.verify(at(-301), body, nowMs))).toBe('timestamp_out_of_range');
    expect(await reason(ours.verify(at(301), body, nowMs))).toBe('timestamp_out_of_range');
    expect(await reason(ours.verify({ ...at(0), 'webhook-timestamp': '1.5e9' }, body, nowMs))).toBe(
      'invalid_timestamp',
    );
  });

  it('checks secrets: prefix, base64, key length', () => {
    expect('key' in parseSecret(secret)).toBe(true);
    expect('key' in parseSecret(generateSecret())).toBe(true);
    expect(parseSecret('abc')).toHaveProperty('error');
    expect(parseSecret('whsec_not base64!')).toHaveProperty('error');
    expect(parseSecret(`whsec_${Buffer.from('short').toString('base64')}`)).toHaveProperty('error');
    expect(parseSecret(42)).toHaveProperty('error');
  });
});

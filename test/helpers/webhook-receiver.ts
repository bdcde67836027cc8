// A real webhook receiver for the workerd tests, run in Node by the global setup: each test registers a
// key with the hook's secret and how many deliveries to fail, then reads back what arrived. Signatures
// are checked with the `standardwebhooks` package, independently of the service's own signer, against the
// hook's delivery secret (derived from its secret, as docs/sessions-webhooks.md tells receivers); that
// the hook's own secret does not verify a delivery is recorded too (a delivery is no valid inbound event).
import { createServer, type Server, type ServerResponse } from 'node:http';
import { Webhook } from 'standardwebhooks';
import { deliverySecret } from '../../src/objects/webhooks/delivery-key.js';

export interface ReceivedDelivery {
  headers: Record<string, string>;
  body: string;
  verified: boolean;
  /** Whether the hook's own (inbound) secret verifies it too: it must not, or the delivery could loop. */
  inboundValid: boolean;
  /** What the receiver answered; 0 for one it left unanswered. */
  status: number;
  at: number;
}

interface Inbox {
  secret: string;
  /** Deliveries still to answer with 500; -1 = all of them. */
  failures: number;
  /** Deliveries, after the failures, to leave unanswered (a sender stopped while it waits). */
  holds: number;
  deliveries: ReceivedDelivery[];
}

/**
 * POST /control/:key {secret, fail, hold}: set up an inbox; GET /control/:key: its deliveries;
 * POST /deliver/:key: a delivery (2xx unless told to fail or hold; 401 for a bad signature).
 */
export async function startWebhookReceiver(): Promise<{ url: string; close(): Promise<void> }> {
  const inboxes = new Map<string, Inbox>();
  const held = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', async () => {
      const [, kind, key] = (req.url ?? '').split('/');
      const json = (status: number, value: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
      if (kind === 'control' && req.method === 'POST') {
        const { secret, fail = 0, hold = 0 } = JSON.parse(body) as { secret: string; fail?: number; hold?: number };
        inboxes.set(key, { secret, failures: fail, holds: hold, deliveries: [] });
        return json(200, { ok: true });
      }
      if (kind === 'control') return json(200, { deliveries: inboxes.get(key)?.deliveries ?? [] });
      const inbox = inboxes.get(key);
      if (kind !== 'deliver' || !inbox) return json(404, { error: 'no such inbox' });
      const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
      const verifies = (secret: string): boolean => {
        try {
          new Webhook(secret).verify(body, headers);
          return true;
        } catch {
          return false;
        }
      };
      const verified = verifies(await deliverySecret(inbox.secret));
      const inboundValid = verifies(inbox.secret);
      let status = 204;
      if (!verified) status = 401;
      else if (inbox.failures !== 0) {
        status = 503;
        if (inbox.failures > 0) inbox.failures--;
      } else if (inbox.holds > 0) {
        inbox.holds--;
        inbox.deliveries.push({ headers, body, verified, inboundValid, status: 0, at: Date.now() });
        held.add(res);
        return;
      }
      inbox.deliveries.push({ headers, body, verified, inboundValid, status, at: Date.now() });
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      for (const res of held) res.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    /** Base URL of the test webhook receiver (Node, loopback). */
    webhookReceiver: string;
  }
}

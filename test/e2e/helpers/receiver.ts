import { createServer, type IncomingHttpHeaders } from 'node:http';
import { Webhook } from 'standardwebhooks';

export interface Delivery {
  headers: IncomingHttpHeaders;
  body: string;
  /** Whether the standardwebhooks package accepted the signature. */
  verified: boolean;
  /** Status this receiver answered. */
  status: number;
}

export interface Receiver {
  url: string;
  deliveries: Delivery[];
  /** The next `n` deliveries get a 500. */
  failNext(n: number): void;
  /** Resolves once `count` deliveries with a valid signature answered 2xx have arrived. */
  waitForSuccess(count?: number, timeoutMs?: number): Promise<Delivery>;
  close(): Promise<void>;
}

/** A real HTTP webhook receiver on loopback that verifies Standard Webhooks signatures independently. */
export async function startReceiver(secret: string): Promise<Receiver> {
  const verifier = new Webhook(secret);
  const deliveries: Delivery[] = [];
  let failures = 0;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      let verified = true;
      try {
        verifier.verify(body, req.headers as Record<string, string>);
      } catch {
        verified = false;
      }
      const status = !verified ? 401 : failures > 0 ? 500 : 204;
      if (verified && failures > 0) failures--;
      deliveries.push({ headers: req.headers, body, verified, status });
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/hook`,
    deliveries,
    failNext: (n) => (failures = n),
    async waitForSuccess(count = 1, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const ok = deliveries.filter((d) => d.verified && d.status < 300);
        if (ok.length >= count) return ok[count - 1];
        if (Date.now() > deadline) throw new Error(`no successful delivery within ${timeoutMs} ms (${deliveries.length} attempts)`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

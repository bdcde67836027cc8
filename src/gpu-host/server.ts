import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GpuHost, type GpuHostOptions, type HostModel } from './gpu-host.js';

export interface RunningHost {
  url: string;
  host: GpuHost;
  close(): Promise<void>;
}

/** Bodies past this are refused before they are read: a pass of 512 tokens and a few restored blocks fits well. */
const MAX_BODY_BYTES = 256 * 2 ** 20;

/**
 * The GPU host on HTTP (node:http): each call a POST of one frame (host-protocol.ts), answered by one. Keep-alive
 * connections, so a pass costs one request on an open socket.
 */
export async function serveGpuHost(
  model: HostModel,
  options: GpuHostOptions & { port?: number; hostname?: string },
): Promise<RunningHost> {
  const host = new GpuHost(model, options);
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES && !refused) {
        refused = true;
        res.writeHead(413, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            error: { message: 'body too large', type: 'invalid_request_error', param: null, code: 'too_large' },
          }),
        );
        req.destroy();
      }
      if (!refused) chunks.push(chunk);
    });
    req.on('end', async () => {
      if (refused) return;
      const body = new Uint8Array(Buffer.concat(chunks));
      const path = new URL(req.url ?? '/', 'http://host').pathname;
      const answer =
        req.method === 'POST'
          ? await host.handle(path, req.headers.authorization, body)
          : {
              status: 405,
              contentType: 'application/json',
              body: new TextEncoder().encode(
                JSON.stringify({
                  error: {
                    message: 'POST only',
                    type: 'invalid_request_error',
                    param: null,
                    code: 'method_not_allowed',
                  },
                }),
              ),
            };
      res.writeHead(answer.status, { 'content-type': answer.contentType, 'content-length': answer.body.byteLength });
      res.end(answer.body);
    });
  });
  server.keepAliveTimeout = 120_000;
  const hostname = options.hostname ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, hostname, resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${hostname}:${port}`,
    host,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await host.closeAll();
    },
  };
}

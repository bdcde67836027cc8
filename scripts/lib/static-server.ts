// A plain static file server over real HTTP, as a MODEL_URL points at (a hub mirror, nginx, a bucket's public
// URL): GET and HEAD of the files under a folder, Content-Length set, 404 for anything else. It counts what
// it serves, so a test can see how many requests a model load made and that each file went out whole.
// With `ranges`, a GET with `Range: bytes=N-` gets 206 and the file from byte N, as those servers answer (a
// pipeline stage reads only its own layers so); without, Range is ignored and the whole file goes out.
import { createReadStream, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, normalize, sep } from 'node:path';

export interface ServedRequest {
  method: string;
  path: string;
  status: number;
  /** Body bytes written to the socket before it finished or closed. */
  bytesSent: number;
}

export interface StaticServer {
  /** Base URL with a trailing slash, e.g. `http://127.0.0.1:40123/`. */
  url: string;
  /** Every request so far, in arrival order; bytesSent is final once the response has ended. */
  requests: ServedRequest[];
  close(): Promise<void>;
}

export async function startStaticServer(root: string, options: { ranges?: boolean } = {}): Promise<StaticServer> {
  const requests: ServedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    const file = normalize(join(root, path));
    const entry: ServedRequest = { method: req.method ?? '', path, status: 404, bytesSent: 0 };
    requests.push(entry);
    let size = -1;
    try {
      if (file.startsWith(root + sep) && statSync(file).isFile()) size = statSync(file).size;
    } catch {}
    if (size < 0 || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(size < 0 ? 404 : 405).end();
      return;
    }
    const range = options.ranges ? /^bytes=(\d+)-$/.exec(req.headers.range ?? '') : null;
    const start = range ? Number(range[1]) : 0;
    if (range && start >= size) {
      entry.status = 416;
      res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
      return;
    }
    entry.status = range ? 206 : 200;
    res.writeHead(entry.status, {
      'content-length': size - start,
      'content-type': 'application/octet-stream',
      ...(range ? { 'content-range': `bytes ${start}-${size - 1}/${size}` } : {}),
    });
    if (req.method === 'HEAD') return void res.end();
    const body = createReadStream(file, { highWaterMark: 1 << 20, start });
    body.on('data', (chunk) => {
      entry.bytesSent += chunk.length;
    });
    body.pipe(res);
    res.on('close', () => body.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

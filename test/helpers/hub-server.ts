// A local stand-in for the Hugging Face hub (the real one is unreachable from tests): serves repos from
// folders with the hub's URL layout and behaviour that model:pull relies on.
//   GET /api/models/{org}/{repo}/revision/{rev}[?blobs=true] -> {sha, siblings: [{rfilename, size, blobId, lfs?}]}
//   GET /{org}/{repo}/resolve/{rev}/{file}  -> the file; LFS files (*.onnx, *.safetensors, *.gguf) answer 302
//                                              to /cdn/{sha256}, as the hub redirects LFS files to its CDN;
//                                              Range: bytes=N- -> 206
// Gated repos want `Authorization: Bearer <token>`. Faults for tests: cut a file's body after N bytes
// (a dropped connection), or serve corrupted bytes.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';

export interface HubRepo {
  dir: string;
  gatedToken?: string;
}

export interface HubLogEntry {
  path: string;
  range?: string;
  authorization?: string;
}

/** Files the hub keeps in LFS (the weights): listed with an lfs sha256, served through the CDN redirect. */
const isLfs = (file: string): boolean => /\.(onnx|onnx_data|safetensors|gguf)$/.test(file);

export class LocalHub {
  readonly log: HubLogEntry[] = [];
  /** file name -> bytes after which the next response for it is cut (then the fault is cleared). */
  readonly cutAfter = new Map<string, number>();
  /** file names served with one byte flipped. */
  readonly corrupt = new Set<string>();
  private server!: Server;
  private readonly blobs = new Map<string, Buffer>(); // sha256 -> content, for /cdn

  constructor(private readonly repos: Record<string, HubRepo>) {}

  static sha(repo: string): string {
    return createHash('sha1').update(repo).digest('hex');
  }

  get endpoint(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => this.handle(req, res));
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  private files(dir: string): string[] {
    const walk = (d: string): string[] =>
      readdirSync(d).flatMap((n) => (statSync(join(d, n)).isDirectory() ? walk(join(d, n)) : [join(d, n)]));
    return walk(dir)
      .map((f) => relative(dir, f).split('\\').join('/'))
      .sort();
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://hub');
    this.log.push({ path: url.pathname, range: req.headers.range, authorization: req.headers.authorization });
    const send = (status: number, body: string | Buffer, headers: Record<string, string> = {}) => {
      res.writeHead(status, headers);
      res.end(body);
    };
    const cdn = /^\/cdn\/([0-9a-f]{64})\/(.+)$/.exec(url.pathname);
    if (cdn) {
      const blob = this.blobs.get(cdn[1]);
      if (blob) this.serveBytes(req, res, decodeURIComponent(cdn[2]), blob);
      else send(404, 'no blob');
      return;
    }
    const api = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    const repoName = api?.[1] ?? resolve?.[1];
    const repo = repoName ? this.repos[repoName] : undefined;
    if (!repo || !repoName) {
      send(404, JSON.stringify({ error: 'Repository not found' }), { 'content-type': 'application/json' });
      return;
    }
    if (repo.gatedToken && req.headers.authorization !== `Bearer ${repo.gatedToken}`) {
      send(
        401,
        JSON.stringify({
          error: 'Access to model is restricted. You must have access to it and be authenticated to access it.',
        }),
        { 'content-type': 'application/json' },
      );
      return;
    }
    const sha = LocalHub.sha(repoName);
    const rev = decodeURIComponent((api ?? resolve)![2]);
    if (rev !== 'main' && rev !== sha) {
      send(404, JSON.stringify({ error: `Invalid rev id: ${rev}` }), { 'content-type': 'application/json' });
      return;
    }
    if (api) {
      const siblings = this.files(repo.dir).map((f) => {
        const content = readFileSync(join(repo.dir, f));
        const entry: Record<string, unknown> = { rfilename: f, size: content.length };
        if (isLfs(f))
          entry.lfs = {
            sha256: createHash('sha256').update(content).digest('hex'),
            size: content.length,
            pointerSize: 134,
          };
        else entry.blobId = createHash('sha1').update(`blob ${content.length}\0`).update(content).digest('hex');
        return entry;
      });
      send(200, JSON.stringify({ id: repoName, sha, siblings }), { 'content-type': 'application/json' });
      return;
    }
    const file = decodeURIComponent(resolve![3]);
    let content: Buffer;
    try {
      content = readFileSync(join(repo.dir, file));
    } catch {
      send(404, 'Entry not found', { 'x-error-code': 'EntryNotFound' });
      return;
    }
    if (isLfs(file)) {
      const digest = createHash('sha256').update(content).digest('hex');
      this.blobs.set(digest, content);
      send(302, '', {
        location: `/cdn/${digest}/${encodeURIComponent(file)}`,
        'x-linked-etag': `"${digest}"`,
        'x-linked-size': String(content.length),
      });
      return;
    }
    this.serveBytes(req, res, file, content);
  }

  private serveBytes(req: IncomingMessage, res: ServerResponse, file: string, content: Buffer): void {
    let body = content;
    if (this.corrupt.has(file)) {
      body = Buffer.from(content);
      body[body.length >> 1] ^= 0xff;
    }
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    let status = 200;
    if (range) {
      const start = Number(range[1]);
      if (start >= body.length) {
        res.writeHead(416, { 'content-range': `bytes */${body.length}` });
        return void res.end();
      }
      res.setHeader('content-range', `bytes ${start}-${body.length - 1}/${body.length}`);
      body = body.subarray(start);
      status = 206;
    }
    const cut = this.cutAfter.get(file);
    res.writeHead(status, {
      'content-length': String(body.length),
      'accept-ranges': 'bytes',
      'content-type': 'application/octet-stream',
    });
    if (cut !== undefined && cut < body.length) {
      this.cutAfter.delete(file);
      // Send the first `cut` bytes, then drop the connection mid-body.
      res.write(body.subarray(0, cut), () => setTimeout(() => res.socket?.destroy(), 20));
      return;
    }
    res.end(body);
  }
}

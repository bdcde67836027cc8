// A small Hugging Face hub client: the two endpoints huggingface_hub itself uses to download a repo.
//   GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true
//       -> {sha, siblings: [{rfilename, size, blobId, lfs?: {sha256, size}}]}
//   GET {endpoint}/{repo}/resolve/{sha}/{file}       (LFS files redirect to a CDN; Range supported)
// Endpoint from HF_ENDPOINT (as huggingface_hub), token from HF_TOKEN (sent as a Bearer token, for
// gated and private repos). Files are fetched at the revision's commit sha, so one pull never mixes
// commits. Downloads go to `<file>.part` and resume from its length with a Range request; every file
// is checked against the hub's checksum (sha256 for LFS files, the git blob sha1 for the others)
// before it is renamed into place.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { dirname, join } from 'node:path';

export interface HubOptions {
  endpoint?: string;
  token?: string;
  /** Attempts per file when the connection fails mid-download (each resumes where the last stopped). */
  attempts?: number;
  onProgress?: (p: Progress) => void;
}

export interface Progress {
  file: string;
  done: number;
  total: number;
  finished: boolean;
}

export interface Sibling {
  rfilename: string;
  size?: number;
  blobId?: string;
  lfs?: { sha256: string; size: number };
}

export interface RevisionInfo {
  sha: string;
  siblings: Sibling[];
}

export class HubError extends Error {
  override readonly name = 'HubError';
}

export function hubDefaults(env: NodeJS.ProcessEnv = process.env): { endpoint: string; token?: string } {
  return {
    endpoint: (env.HF_ENDPOINT || 'https://huggingface.co').replace(/\/+$/, ''),
    token: env.HF_TOKEN || undefined,
  };
}

const REPO = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

function authHeaders(token: string | undefined): Record<string, string> {
  return token ? { authorization: `Bearer ${token}` } : {};
}

function explain(status: number, what: string, token: string | undefined): string {
  if (status === 401 || status === 403) {
    return token
      ? `${what}: HTTP ${status}: HF_TOKEN was sent but does not grant access (accept the model's terms on its hub page, or use a token with read access)`
      : `${what}: HTTP ${status}: the repo is gated or private; set HF_TOKEN to a token that can read it`;
  }
  if (status === 404) return `${what}: HTTP 404: no such repo, revision or file`;
  return `${what}: HTTP ${status}`;
}

export async function revisionInfo(repo: string, revision: string, opts: HubOptions = {}): Promise<RevisionInfo> {
  if (!REPO.test(repo)) throw new HubError(`repo must look like <org>/<name>, got ${JSON.stringify(repo)}`);
  const { endpoint, token } = { ...hubDefaults(), ...opts };
  const url = `${endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}?blobs=true`;
  const res = await fetch(url, { headers: authHeaders(token) });
  if (!res.ok) throw new HubError(explain(res.status, `${repo}@${revision}`, token));
  const info = (await res.json()) as Partial<RevisionInfo>;
  if (typeof info.sha !== 'string' || !Array.isArray(info.siblings))
    throw new HubError(`${url}: unexpected answer (no sha / siblings)`);
  return { sha: info.sha, siblings: info.siblings };
}

/** git's blob id: sha1("blob <size>\0" + content), what the hub reports for files not in LFS. */
function gitBlobHasher(size: number): Hash {
  return createHash('sha1').update(`blob ${size}\0`);
}

async function hashFile(path: string, hash: Hash): Promise<void> {
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
}

function expected(s: Sibling): { size?: number; algo: 'sha256' | 'git-sha1' | null; digest?: string } {
  if (s.lfs) return { size: s.lfs.size, algo: 'sha256', digest: s.lfs.sha256 };
  if (s.blobId) return { size: s.size, algo: 'git-sha1', digest: s.blobId };
  return { size: s.size, algo: null };
}

/** Downloads one file into `dest` (resuming `dest.part`), verified; skips it when `dest` is already right. */
export async function downloadFile(
  repo: string,
  sha: string,
  sibling: Sibling,
  dest: string,
  opts: HubOptions = {},
): Promise<'downloaded' | 'present'> {
  const { endpoint, token } = { ...hubDefaults(), ...opts };
  const want = expected(sibling);
  const file = sibling.rfilename;
  const verify = async (path: string, hash: Hash | null): Promise<string | null> => {
    const size = statSync(path).size;
    if (want.size !== undefined && size !== want.size) return `size ${size} != ${want.size}`;
    if (!want.algo || !want.digest) return null;
    const h = hash ?? (want.algo === 'sha256' ? createHash('sha256') : gitBlobHasher(size));
    if (!hash) await hashFile(path, h);
    const digest = h.digest('hex');
    return digest === want.digest ? null : `${want.algo} ${digest} != ${want.digest}`;
  };
  if (existsSync(dest) && (await verify(dest, null)) === null) {
    opts.onProgress?.({ file, done: want.size ?? 0, total: want.size ?? 0, finished: true });
    return 'present';
  }
  mkdirSync(dirname(dest), { recursive: true });
  const part = `${dest}.part`;
  const url = `${endpoint}/${repo}/resolve/${sha}/${file.split('/').map(encodeURIComponent).join('/')}`;
  const attempts = opts.attempts ?? 4;
  let lastError: unknown;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    let have = existsSync(part) ? statSync(part).size : 0;
    if (want.size !== undefined && have > want.size) {
      rmSync(part);
      have = 0;
    }
    const headers: Record<string, string> = { ...authHeaders(token), 'accept-encoding': 'identity' };
    if (have > 0) headers.range = `bytes=${have}-`;
    let res: Response;
    try {
      res = await fetch(url, { headers, redirect: 'follow' });
    } catch (err) {
      lastError = err;
      continue;
    }
    if (res.status === 416 && want.size !== undefined && have === want.size) {
      await res.body?.cancel();
    } else if (res.status === 416 && have > 0) {
      // The leftover .part is not a prefix the server can continue (longer than the file): start over.
      await res.body?.cancel();
      rmSync(part, { force: true });
      have = 0;
      continue;
    } else if (!res.ok) {
      await res.body?.cancel();
      throw new HubError(explain(res.status, `${repo}/${file}`, token));
    } else {
      // 206: the server continues at `have`; 200: it ignored the range, so start over.
      if (res.status !== 206) have = 0;
      const total = want.size ?? have + Number(res.headers.get('content-length') ?? 0);
      const handle = await open(part, have > 0 ? 'a' : 'w');
      let done = have;
      try {
        const reader = res.body!.getReader();
        for (;;) {
          const { value, done: end } = await reader.read();
          if (end) break;
          await handle.write(value);
          done += value.byteLength;
          opts.onProgress?.({ file, done, total, finished: false });
        }
      } catch (err) {
        lastError = err; // connection lost: the next attempt resumes from what was written
        continue;
      } finally {
        await handle.close();
      }
    }
    if (want.size !== undefined && statSync(part).size < want.size) {
      lastError = new Error(`connection closed at ${statSync(part).size} of ${want.size} bytes`);
      continue;
    }
    const bad = await verify(part, null);
    if (bad) {
      rmSync(part, { force: true });
      throw new HubError(
        `${repo}/${file}: checksum mismatch (${bad}); the partial download was removed, run the pull again`,
      );
    }
    renameSync(part, dest);
    opts.onProgress?.({ file, done: statSync(dest).size, total: statSync(dest).size, finished: true });
    return 'downloaded';
  }
  throw new HubError(
    `${repo}/${file}: download failed after ${attempts} attempts (${lastError instanceof Error ? lastError.message : String(lastError)}); run the pull again to resume from ${part}`,
  );
}

/** Where a pulled repo's file lands inside the model folder (same relative path). */
export function destination(outDir: string, file: string): string {
  if (file.split('/').some((p) => p === '..' || p === ''))
    throw new HubError(`refusing file name ${JSON.stringify(file)}`);
  return join(outDir, file);
}

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { freePort } from '../../../scripts/lib/free-port.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

export interface DevServer {
  url: string;
  /** Where Durable Object storage lives; a restart with the same folder keeps every session and job. */
  persistDir: string;
  /** Output so far, for failure messages. */
  log(): string;
  stop(): Promise<void>;
  /** SIGKILL, at once: no shutdown, whatever was being written is cut where it was. */
  kill(): Promise<void>;
}

/** Starts `wrangler dev` (real workerd, real HTTP) on a free port and waits until it answers. */
export async function startDevServer(vars: Record<string, string> = {}, persistDir?: string): Promise<DevServer> {
  const port = await freePort();
  const dir = persistDir ?? mkdtempSync(join(tmpdir(), 'edge-infer-e2e-'));
  const args = [
    'wrangler',
    'dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--inspector-port',
    String(await freePort()),
    '--persist-to',
    dir,
  ];
  for (const [name, value] of Object.entries(vars)) args.push('--var', `${name}:${value}`);
  const child: ChildProcess = spawn('npx', args, {
    cwd: ROOT,
    env: { ...process.env, WRANGLER_SEND_METRICS: 'false', NO_COLOR: '1', CI: 'true' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group, so stop() ends wrangler and workerd together
  });
  // The last 256 KiB of wrangler's output, for failure messages (a runaway log must not exhaust the string).
  let output = '';
  const keep = (d: Buffer): void => {
    output = (output + d.toString()).slice(-256 * 1024);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    process.kill(-child.pid!, 'SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
    if (child.exitCode === null) process.kill(-child.pid!, 'SIGKILL');
  };
  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    process.kill(-child.pid!, 'SIGKILL');
    await exited;
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`wrangler dev exited (${child.exitCode}):\n${output}`);
    try {
      const res = await fetch(`${url}/v1/models`, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      break;
    } catch {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`wrangler dev did not answer within 60 s:\n${output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  return { url, persistDir: dir, log: () => output, stop, kill };
}

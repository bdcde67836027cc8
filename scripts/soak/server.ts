// `npm start` as the soak test runs it: on loopback, on a port of its own, with storage in a folder that
// outlives a restart (so sessions must survive it), in its own process group so stop() ends workerd too.
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../lib/free-port.js';

export interface Server {
  url: string;
  stop(): Promise<void>;
}

export async function startServer(port: number, persistDir: string, log: (line: string) => void): Promise<Server> {
  const args = [
    'start',
    '--',
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--inspector-port',
    String(await freePort()),
    '--persist-to',
    persistDir,
  ];
  const child: ChildProcess = spawn('npm', args, {
    env: { ...process.env, WRANGLER_SEND_METRICS: 'false', NO_COLOR: '1', CI: 'true' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  for (const stream of [child.stdout!, child.stderr!]) {
    let partial = '';
    stream.on('data', (d: Buffer) => {
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) log(line);
    });
  }
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    process.kill(-child.pid!, 'SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGKILL');
  };
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`npm start exited (${child.exitCode})`);
    try {
      const res = await fetch(`${url}/v1/models`, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.ok) break;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error('npm start did not answer within 90 s');
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return { url, stop };
}

// A GPU host in a process of its own (scripts/gpu-host.ts), for `npm start -- --gpu`, the e2e test and the bench:
// started, waited for until it says it serves, stopped or killed with its process group.
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface GpuHostProcessOptions {
  /** A folder, or a name under ./models. */
  model: string;
  port: number;
  secret: string;
  backend?: string;
  dtype?: string;
  /** Each line of its output. */
  onLine?: (line: string) => void;
  readyWithinMs?: number;
  /** Leave the host in the caller's process group (npm start: Ctrl-C ends both). */
  attached?: boolean;
}

export interface GpuHostProcess {
  url: string;
  /** What it said it serves: `gpu-host: serving ...`. */
  banner: string;
  log(): string;
  stop(): Promise<void>;
  kill(): Promise<void>;
}

export async function startGpuHostProcess(options: GpuHostProcessOptions): Promise<GpuHostProcess> {
  const tsx = createRequire(import.meta.url).resolve('tsx');
  const args = ['--import', tsx, 'scripts/gpu-host.ts', '--model', options.model, '--port', String(options.port)];
  if (options.backend) args.push('--backend', options.backend);
  if (options.dtype) args.push('--dtype', options.dtype);
  const child: ChildProcess = spawn(process.execPath, args, {
    cwd: ROOT,
    // The secret through the environment, not the command line another user's `ps` shows.
    env: { ...process.env, GPU_HOST_SECRET: options.secret },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: !options.attached,
  });
  let output = '';
  let banner: ((line: string) => void) | undefined;
  const served = new Promise<string>((resolve) => {
    banner = resolve;
  });
  for (const stream of [child.stdout!, child.stderr!]) {
    let partial = '';
    stream.on('data', (d: Buffer) => {
      const text = d.toString();
      output = (output + text).slice(-64 * 1024);
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        options.onLine?.(line);
        if (line.startsWith('gpu-host: serving')) banner?.(line);
      }
    });
  }
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const end = async (signal: 'SIGTERM' | 'SIGKILL'): Promise<void> => {
    if (gone()) return;
    if (options.attached) child.kill(signal);
    else process.kill(-child.pid!, signal);
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
  };
  const ms = options.readyWithinMs ?? 120_000;
  let timer: NodeJS.Timeout | undefined;
  const line = await Promise.race([
    served,
    exited.then(() => {
      throw new Error(`the GPU host exited (${child.exitCode}):\n${output}`);
    }),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the GPU host did not start within ${ms / 1000} s:\n${output}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
  return {
    url: `http://127.0.0.1:${options.port}`,
    banner: line,
    log: () => output,
    stop: () => end('SIGTERM'),
    kill: () => end('SIGKILL'),
  };
}

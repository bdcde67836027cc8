// A local server for tests, the soak run and the bench: real workerd over real HTTP on a free port, storage in
// a folder that outlives a restart, in its own process group so stop() ends wrangler and workerd together.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';
import { pipelineConfigArgs } from './stage-configs.js';
import { ensureInspectorProxyPatched } from './wrangler-inspector-patch.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface DevServerOptions {
  /** `wrangler dev` itself (default), or `npm start` as a user runs it (models made first, model vars read). */
  via?: 'wrangler' | 'npm-start';
  /** Default: a free port. */
  port?: number;
  /** Each line of output, as it comes. */
  onLine?: (line: string) => void;
  /** How long to wait for the first answer (default 60 s; `npm start` may generate the models first). */
  readyWithinMs?: number;
  /** The configs to run (`-c`), first one served: e.g. a pipeline's head without a stage that runs apart. */
  configs?: string[];
  /** More arguments, after the port and vars (e.g. `--stage-processes` for `npm start`). */
  args?: string[];
  /** More environment (e.g. WRANGLER_REGISTRY_PATH: a dev registry of the test's own). */
  env?: Record<string, string>;
}

export interface DevServer {
  url: string;
  /** The DevTools inspector's port (`/json` lists its targets), for measuring the isolate's memory. */
  inspectorPort: number;
  /** Where Durable Object storage lives; a restart with the same folder keeps every session and job. */
  persistDir: string;
  /** The last 256 KiB of output, for failure messages. */
  log(): string;
  stop(): Promise<void>;
  /** SIGKILL, at once: no shutdown, whatever was being written is cut where it was. */
  kill(): Promise<void>;
}

/** Starts the server and waits until it answers on `/v1/models`; `vars` become `--var NAME:VALUE`. */
export async function startDevServer(
  vars: Record<string, string> = {},
  persistDir?: string,
  options: DevServerOptions = {},
): Promise<DevServer> {
  ensureInspectorProxyPatched();
  const port = options.port ?? (await freePort());
  const inspectorPort = await freePort();
  const dir = persistDir ?? mkdtempSync(join(tmpdir(), 'edge-infer-dev-'));
  const flags = ['--ip', '127.0.0.1', '--port', String(port), '--inspector-port', String(inspectorPort)];
  flags.push('--persist-to', dir);
  for (const [name, value] of Object.entries(vars)) flags.push('--var', `${name}:${value}`);
  flags.push(...(options.args ?? []));
  // `npm start` writes the pipeline's configs itself; wrangler dev is given them here.
  const configs = options.configs
    ? options.configs.flatMap((file) => ['-c', file])
    : options.via === 'npm-start'
      ? []
      : // Tagged by port: beside another pipeline on this machine, each finds its own stages.
        pipelineConfigArgs(ROOT, readFileSync(`${ROOT}/wrangler.toml`, 'utf8'), flags, `p${port}`);
  const [command, args] =
    options.via === 'npm-start'
      ? ['npm', ['start', '--', ...flags]]
      : ['npx', ['wrangler', 'dev', ...configs, ...flags]];
  const child: ChildProcess = spawn(command, args, {
    cwd: ROOT,
    env: { ...process.env, WRANGLER_SEND_METRICS: 'false', NO_COLOR: '1', CI: 'true', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  // A runaway log (workerd repeating an error) must not exhaust the string.
  let output = '';
  for (const stream of [child.stdout!, child.stderr!]) {
    let partial = '';
    stream.on('data', (d: Buffer) => {
      const text = d.toString();
      output = (output + text).slice(-256 * 1024);
      if (!options.onLine) return;
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) options.onLine(line);
    });
  }
  const url = `http://127.0.0.1:${port}`;
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
  const end = async (signal: 'SIGTERM' | 'SIGKILL'): Promise<void> => {
    if (gone()) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    process.kill(-child.pid!, signal);
    if (signal === 'SIGKILL') return void (await exited);
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
    if (!gone()) process.kill(-child.pid!, 'SIGKILL');
  };
  const deadline = Date.now() + (options.readyWithinMs ?? 60_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${command} ${args[0]} exited (${child.exitCode}):\n${output}`);
    try {
      await probe(`${url}/v1/models`, 2000);
      break;
    } catch {
      if (Date.now() > deadline) {
        await end('SIGTERM');
        throw new Error(
          `${command} ${args[0]} did not answer within ${(options.readyWithinMs ?? 60_000) / 1000} s:\n${output}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  return {
    url,
    inspectorPort,
    persistDir: dir,
    log: () => output,
    stop: () => end('SIGTERM'),
    kill: () => end('SIGKILL'),
  };
}

/**
 * One readiness probe, given up after `ms` however it hangs. A start was once seen to outlast both the 60 s
 * ready deadline and the test's 120 s hook with no error of its own; a probe that cannot stall keeps the
 * deadline (and its message, with wrangler's output) true.
 */
async function probe(url: string, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('probe timed out')), ms + 500);
  });
  try {
    await Promise.race([fetch(url, { signal: AbortSignal.timeout(ms) }).then((res) => res.arrayBuffer()), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

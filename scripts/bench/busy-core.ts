// "The other core busy": a child process that streams memory without pause (the roofline's WebAssembly
// read over 512 MiB, far past the caches) while a bench measures. On a 2-core machine it takes the core the
// bench does not use and a share of the memory bandwidth, as a neighbour does on a shared host: the
// float paths, bound by memory, fall; kernels bound by instructions should not. Issue 48 asks for both rows.
//
//   startBusyCore() → measure → stop(): the child's own read rate while it ran comes back with it.
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createBandwidthMeter } from './roofline.js';
import { median } from './stats.js';

export interface BusyCore {
  /** Ends the child; the median GB/s it read while it ran. Rejects if it died meanwhile (the rows were idle). */
  stop(): Promise<number>;
}

const READY = 'ready';
const BYTES = 2 ** 29;

/** The tables' line on the busy condition, with what the child read while the rows were measured. */
export function busyCoreNote(gbps: number): string {
  return `Other core busy: a second process streaming ${BYTES / 2 ** 20} MiB over and over (${gbps.toFixed(1)} GB/s meanwhile).`;
}

export function startBusyCore(bytes = BYTES): Promise<BusyCore> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), String(bytes)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const rates: number[] = [];
  return new Promise((resolve, reject) => {
    let ready = false;
    let buffered = '';
    child.once('error', reject);
    child.once('exit', (code) => {
      if (!ready) reject(new Error(`the busy-core child exited with ${code} before it was ready`));
    });
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        if (line === READY && !ready) {
          ready = true;
          resolve({
            stop: () => {
              const died = child.exitCode !== null || child.signalCode !== null;
              return stopChild(child).then(() => {
                if (died || rates.length === 0)
                  throw new Error('the busy-core child stopped before the measurement ended: its rows were not busy');
                return median(rates);
              });
            },
          });
          // A bench that exits without stop() (process.exit, a crash) must not leave it spinning.
          process.once('exit', () => child.kill('SIGKILL'));
        } else if (line) rates.push(Number(line));
      }
    });
  });
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/**
 * The child: read `bytes` over and over, printing each pass's GB/s, until killed, or until its parent is gone
 * (killed itself, the parent's exit hook never ran): the loop never yields, so a closed pipe would not stop it.
 */
function spin(bytes: number): void {
  const meter = createBandwidthMeter(bytes);
  const parent = process.ppid;
  process.stdout.write(`${READY}\n`);
  while (process.ppid === parent) process.stdout.write(`${(meter.measure() / 1e9).toFixed(2)}\n`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) spin(Number(process.argv[2]));

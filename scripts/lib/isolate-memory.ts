// The memory of the `wrangler dev` isolate (the worker and its Durable Objects share one) as a Workers
// isolate's 128 MB limit counts it: the JS heap, ArrayBuffers and WebAssembly memories together, read
// through the DevTools protocol. The isolate itself cannot see these figures (workerd's performance.memory
// is absent and process.memoryUsage() and v8.getHeapStatistics() answer zeros), so they are measured from
// outside. docs/platform.md ("Isolate memory") says what each part holds.
import { execFileSync } from 'node:child_process';
import type { DevServer } from './dev-server.js';
import { DevToolsClient } from './devtools-client.js';

export interface IsolateMemory {
  /** V8's heap in use after a full collection: JS objects, strings, compiled code (getHeapUsage usedSize). */
  jsHeapBytes: number;
  /** ArrayBuffers' backing stores (getHeapUsage backingStorageSize): it leaves out WebAssembly memories. */
  arrayBufferBytes: number;
  /** Each WebAssembly.Memory of the isolate, in bytes (the kernels', and xgrammar's or onnxruntime's once used). */
  wasmMemories: number[];
  /** The three together: what counts against the isolate's 128 MB. */
  totalBytes: number;
}

interface RemoteObject {
  objectId?: string;
  value?: unknown;
}

/** One inspector session on a dev server's isolate; keep it open for every measurement (see DevToolsClient). */
export class IsolateMemoryProbe {
  private constructor(
    private readonly devtools: DevToolsClient,
    /** Gives the isolate work, so that it runs the inspector's task. */
    private readonly wake: () => Promise<void>,
  ) {}

  /** The isolate wrangler dev's inspector serves: the first config's Worker (its worker and objects). */
  static async open(server: Pick<DevServer, 'url' | 'inspectorPort'>): Promise<IsolateMemoryProbe> {
    const devtools = await DevToolsClient.connect(server.inspectorPort);
    await devtools.send('Runtime.enable');
    // A 404, nothing else.
    const wake = () =>
      fetch(`${server.url}/__isolate-memory-probe`)
        .then((r) => void r.arrayBuffer())
        .catch(() => {});
    return new IsolateMemoryProbe(devtools, wake);
  }

  /**
   * Another isolate of the process, through workerd's own inspector (workerdTargets): a pipeline stage's
   * Worker, which wrangler's inspector does not list. `wake` must make work reach it (a request that passes
   * through the stage).
   */
  static async openTarget(url: string, wake: () => Promise<void>): Promise<IsolateMemoryProbe> {
    const devtools = await DevToolsClient.connectTo(url);
    await devtools.send('Runtime.enable');
    return new IsolateMemoryProbe(devtools, wake);
  }

  /**
   * A full collection, then the heap's figures and every WebAssembly.Memory's size. V8 answers
   * HeapProfiler.collectGarbage from a task on the isolate's thread, which workerd runs only when the
   * isolate has work: so, unless it answers at once (a busy isolate), the isolate is given work until it does.
   */
  async measure(): Promise<IsolateMemory> {
    const collected = this.devtools.send('HeapProfiler.collectGarbage', {}, 60_000);
    let done = false;
    void collected.finally(() => {
      done = true;
    });
    for (let first = true; ; first = false) {
      await Promise.race([collected, new Promise((resolve) => setTimeout(resolve, first ? 200 : 100))]).catch(() => {});
      if (done) break;
      await this.wake();
    }
    await collected;
    const usage = await this.devtools.send<{ usedSize: number; backingStorageSize: number }>('Runtime.getHeapUsage');
    const wasmMemories = await this.wasmMemories();
    return {
      jsHeapBytes: usage.usedSize,
      arrayBufferBytes: usage.backingStorageSize,
      wasmMemories,
      totalBytes: usage.usedSize + usage.backingStorageSize + wasmMemories.reduce((a, b) => a + b, 0),
    };
  }

  /**
   * Every WebAssembly.Memory on the heap (Runtime.queryObjects by prototype), for each execution context the
   * runtime announced: a memory is an object of the context that made it, with that context's prototype.
   */
  private async wasmMemories(): Promise<number[]> {
    const sizes: number[] = [];
    const group = 'isolate-memory';
    for (const contextId of new Set(this.devtools.contexts)) {
      try {
        const proto = await this.devtools.send<{ result: RemoteObject }>('Runtime.evaluate', {
          expression: 'WebAssembly.Memory.prototype',
          contextId,
          objectGroup: group,
        });
        if (!proto.result.objectId) continue;
        const found = await this.devtools.send<{ objects: RemoteObject }>('Runtime.queryObjects', {
          prototypeObjectId: proto.result.objectId,
          objectGroup: group,
        });
        const lengths = await this.devtools.send<{ result: RemoteObject }>('Runtime.callFunctionOn', {
          objectId: found.objects.objectId,
          functionDeclaration: 'function () { return this.map((m) => m.buffer.byteLength); }',
          returnByValue: true,
          objectGroup: group,
        });
        sizes.push(...(lengths.result.value as number[]));
      } catch (err) {
        // A context that is gone (an isolate reloaded) has nothing left to count.
        if (!/context/i.test(String(err))) throw err;
      }
    }
    await this.devtools.send('Runtime.releaseObjectGroup', { objectGroup: group });
    return sizes.sort((a, b) => b - a);
  }

  close(): void {
    this.devtools.close();
  }
}

/** A target of workerd's own inspector: `core:user:<script>` is a Worker script's isolate. */
export interface WorkerdTarget {
  id: string;
  webSocketDebuggerUrl: string;
}

/**
 * Every isolate the workerd processes on this machine list on their own inspectors (the second listening port
 * `wrangler dev` gives workerd, not its `--inspector-port`): with several configs in one `wrangler dev`, wrangler's
 * inspector lists only the first one's isolate, workerd's lists each by name. An isolate wrangler's proxy holds
 * (the first config's) answers only through the proxy.
 */
export async function workerdTargets(): Promise<WorkerdTarget[]> {
  const listening = execFileSync('ss', ['-ltnpH'], { encoding: 'utf8' });
  const ports = new Set(
    listening
      .split('\n')
      .filter((line) => line.includes('"workerd"'))
      .map((line) => /127\.0\.0\.1:(\d+)/.exec(line)?.[1])
      .filter((p): p is string => p !== undefined),
  );
  const found: WorkerdTarget[] = [];
  for (const port of ports) {
    const list = await fetch(`http://127.0.0.1:${port}/json/list`, { signal: AbortSignal.timeout(2000) })
      .then((r) => r.json() as Promise<unknown>)
      .catch(() => undefined);
    if (Array.isArray(list))
      found.push(
        ...(list as WorkerdTarget[]).filter((t) => typeof t?.id === 'string' && t.id.startsWith('core:user:')),
      );
  }
  return found;
}

const MiB = 2 ** 20;

/** One line of figures in MiB, for logs and the bench. */
export function describeIsolateMemory(m: IsolateMemory): string {
  const wasm = m.wasmMemories.map((b) => (b / MiB).toFixed(1)).join(' + ') || '0';
  return (
    `${(m.totalBytes / MiB).toFixed(1)} MiB = JS heap ${(m.jsHeapBytes / MiB).toFixed(1)} + ArrayBuffers ` +
    `${(m.arrayBufferBytes / MiB).toFixed(1)} + WebAssembly memory ${wasm}`
  );
}

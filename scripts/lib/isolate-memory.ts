// The memory of the `wrangler dev` isolate (the worker and its Durable Objects share one) as a Workers
// isolate's 128 MB limit counts it: the JS heap, ArrayBuffers and WebAssembly memories together, read
// through the DevTools protocol. The isolate itself cannot see these figures (workerd's performance.memory
// is absent and process.memoryUsage() and v8.getHeapStatistics() answer zeros), so they are measured from
// outside. docs/platform.md ("Isolate memory") says what each part holds.
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
    private readonly server: Pick<DevServer, 'url'>,
  ) {}

  static async open(server: Pick<DevServer, 'url' | 'inspectorPort'>): Promise<IsolateMemoryProbe> {
    const devtools = await DevToolsClient.connect(server.inspectorPort);
    await devtools.send('Runtime.enable');
    return new IsolateMemoryProbe(devtools, server);
  }

  /**
   * A full collection, then the heap's figures and every WebAssembly.Memory's size. V8 answers
   * HeapProfiler.collectGarbage from a task on the isolate's thread, which workerd runs only when the
   * isolate has work: so the worker is sent requests (a 404, nothing else) until the answer comes.
   */
  async measure(): Promise<IsolateMemory> {
    const collected = this.devtools.send('HeapProfiler.collectGarbage', {}, 60_000);
    let done = false;
    void collected.finally(() => {
      done = true;
    });
    while (!done) {
      await fetch(`${this.server.url}/__isolate-memory-probe`)
        .then((r) => r.arrayBuffer())
        .catch(() => {});
      await Promise.race([collected, new Promise((resolve) => setTimeout(resolve, 100))]).catch(() => {});
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

const MiB = 2 ** 20;

/** One line of figures in MiB, for logs and the bench. */
export function describeIsolateMemory(m: IsolateMemory): string {
  const wasm = m.wasmMemories.map((b) => (b / MiB).toFixed(1)).join(' + ') || '0';
  return (
    `${(m.totalBytes / MiB).toFixed(1)} MiB = JS heap ${(m.jsHeapBytes / MiB).toFixed(1)} + ArrayBuffers ` +
    `${(m.arrayBufferBytes / MiB).toFixed(1)} + WebAssembly memory ${wasm}`
  );
}

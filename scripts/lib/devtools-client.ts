// One DevTools protocol session over the inspector `wrangler dev` serves (startDevServer's inspectorPort).
// wrangler's inspector proxy takes one client at a time and closes a second with 1013, and a client it has
// not yet seen leave keeps the slot: so a caller opens one session and keeps it for every measurement.
import { WebSocket } from 'undici';

interface Reply {
  id: number;
  result?: Record<string, unknown>;
  error?: { code: number; message: string };
}

export class DevToolsClient {
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  private closed: Error | undefined;
  /** Execution contexts the runtime announced (after Runtime.enable), newest last. */
  readonly contexts: number[] = [];
  /** Called with every event (a message without an id): method and params. */
  onEvent: ((method: string, params: Record<string, unknown>) => void) | undefined;

  private constructor(private readonly ws: WebSocket) {
    ws.onmessage = (event) => {
      const message = JSON.parse(String(event.data)) as Reply & {
        method?: string;
        params?: { context?: { id: number } };
      };
      if (message.method === 'Runtime.executionContextCreated' && message.params?.context)
        this.contexts.push(message.params.context.id);
      if (message.method && message.id === undefined) this.onEvent?.(message.method, message.params ?? {});
      const waiting = message.id === undefined ? undefined : this.pending.get(message.id);
      if (!waiting) return;
      this.pending.delete(message.id);
      waiting.resolve(message);
    };
    ws.onclose = (event) => {
      this.closed = new Error(`the inspector closed the session (${event.code} ${event.reason})`);
      for (const { reject } of this.pending.values()) reject(this.closed);
      this.pending.clear();
    };
  }

  /**
   * Opens a session on the first target the inspector at `port` lists. wrangler's proxy refuses an upgrade
   * without an allowed Origin (DevTools' own pages, or localhost).
   */
  static async connect(port: number, timeoutMs = 10_000): Promise<DevToolsClient> {
    const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as {
      webSocketDebuggerUrl: string;
    }[];
    if (!targets[0]) throw new Error(`the inspector on port ${port} lists no target`);
    return DevToolsClient.connectTo(targets[0].webSocketDebuggerUrl, timeoutMs);
  }

  /** Opens a session on one target by its `webSocketDebuggerUrl` (a workerd inspector's target, say). */
  static async connectTo(url: string, timeoutMs = 10_000): Promise<DevToolsClient> {
    const ws = new WebSocket(url, { headers: { origin: 'http://127.0.0.1' } } as never);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the inspector at ${url} did not open a session`)), timeoutMs);
      ws.onopen = () => {
        clearTimeout(timer);
        resolve();
      };
      ws.onerror = () => {
        clearTimeout(timer);
        reject(new Error(`the inspector at ${url} refused a session`));
      };
    });
    return new DevToolsClient(ws);
  }

  /** Sends one command; rejects on a protocol error, a closed session or after `timeoutMs`. */
  async send<T = Record<string, unknown>>(
    method: string,
    params: Record<string, unknown> = {},
    timeoutMs = 30_000,
  ): Promise<T> {
    if (this.closed) throw this.closed;
    const id = ++this.nextId;
    const reply = await new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer from the inspector within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
    if (reply.error) throw new Error(`${method}: ${reply.error.message} (${reply.error.code})`);
    return (reply.result ?? {}) as T;
  }

  close(): void {
    this.ws.close();
  }
}

// llama.cpp's WebAssembly build (@wllama/wllama) in Node 20, single thread, for the bench and the GGUF
// writer's test. wllama is written for browsers; what it needs from one is small:
// - `Worker`: it starts its llama.cpp worker from a Blob URL. The shim reads that Blob and runs the code in a
//   worker_threads Worker behind `self`/`postMessage`/`onmessage`/`navigator` stubs.
// - `self.location` and `navigator` on the main thread (asset URLs, browser sniffing).
// - Its default build needs JSPI and memory64, which Node 20 lacks, so it picks its "compat" build
//   (Asyncify, wasm32) by itself; it would fetch that from a CDN, so we point it at the copy in
//   @wllama/wllama-compat (a pinned devDependency) instead. Models are Blobs from fs.openAsBlob.
import { resolveObjectURL } from 'node:buffer';
import { openAsBlob, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker as NodeWorker } from 'node:worker_threads';
import type { TextTokenizer } from '../../src/tokenizer/tokenizer.js';
// The package has no `exports`, and its `main` (index.js) is not shipped: import the built bundle.
import type { Wllama as WllamaType, LoadModelParams } from '@wllama/wllama/esm/index.js';

const require = createRequire(import.meta.url);
const COMPAT_DIR = join(dirname(require.resolve('@wllama/wllama-compat/package.json')), 'wasm');
const WLLAMA_DIR = join(dirname(require.resolve('@wllama/wllama/package.json')), 'src/wasm');
const BASE_HREF = pathToFileURL(`${process.cwd()}/`).href;
const NAVIGATOR = { userAgent: 'Node.js', hardwareConcurrency: 1 };

/** Runs first in the worker, before wllama's code: the globals a browser worker would have. */
const WORKER_PRELUDE = `
const { parentPort } = require('node:worker_threads');
globalThis.self = globalThis;
self.location = { href: ${JSON.stringify(BASE_HREF)} };
globalThis.navigator = ${JSON.stringify(NAVIGATOR)};
globalThis.postMessage = (data, transfer) => parentPort.postMessage(data, transfer);
let handler = null;
Object.defineProperty(globalThis, 'onmessage', { get: () => handler, set: (f) => { handler = f; }, configurable: true });
parentPort.on('message', (data) => handler && handler({ data }));
`;

/** The part of the browser Worker API wllama uses, over a worker_threads Worker. */
class BlobUrlWorker {
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onerror: ((e: unknown) => void) | null = null;
  private worker?: NodeWorker;
  private queued: [unknown, Transferable[] | undefined][] = [];
  private terminated = false;

  constructor(url: string | URL) {
    const blob = resolveObjectURL(String(url));
    if (!blob) throw new Error(`Worker shim: ${String(url)} is not a Blob URL`);
    // Blob.text() is async: messages posted before the worker exists wait in `queued`.
    void blob.text().then((code) => {
      if (this.terminated) return;
      const w = new NodeWorker(WORKER_PRELUDE + code, { eval: true });
      w.on('message', (data) => this.onmessage?.({ data }));
      w.on('error', (e) => (this.onerror ? this.onerror(e) : console.error(e)));
      for (const [m, t] of this.queued) w.postMessage(m, t as never);
      this.queued = [];
      this.worker = w;
    });
  }

  postMessage(message: unknown, transfer?: Transferable[]): void {
    if (this.worker) this.worker.postMessage(message, transfer as never);
    else this.queued.push([message, transfer]);
  }

  terminate(): void {
    this.terminated = true;
    void this.worker?.terminate();
  }
}

let installed = false;
function installBrowserStubs(): void {
  if (installed) return;
  installed = true;
  const g = globalThis as Record<string, unknown>;
  g.self ??= globalThis;
  (g.self as Record<string, unknown>).location ??= { href: BASE_HREF };
  // Node 21+ has its own navigator; Node 20 has none.
  if (!('navigator' in g)) g.navigator = NAVIGATOR;
  g.Worker = BlobUrlWorker;
}

export interface WllamaNode {
  wllama: WllamaType;
  /**
   * Greedy completion of a text prompt (llama.cpp tokenizes it; no BOS): the generated ids, and llama.cpp's
   * own decode rate (its server timings: tokens after the first, wall clock, JS round trips included).
   */
  greedy(
    prompt: string,
    maxTokens: number,
    options?: { bannedIds?: readonly number[] },
  ): Promise<{ ids: number[]; promptTokens: number; decodeTokPerS: number }>;
  exit(): Promise<void>;
}

/**
 * Ids whose bytes are not valid UTF-8 on their own (lone bytes >= 0x80, split characters). wllama returns
 * the completion's text as JSON and fails on invalid UTF-8, which random weights produce; banning these ids
 * keeps every output decodable. Compare against a reference that bans the same ids.
 */
export function nonUtf8TokenIds(tokenizer: TextTokenizer): number[] {
  const strict = new TextDecoder('utf-8', { fatal: true });
  const ids: number[] = [];
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    if (tokenizer.isAddedToken(id)) continue;
    try {
      strict.decode(tokenizer.tokenBytes(id));
    } catch {
      ids.push(id);
    }
  }
  return ids;
}

/** Loads a GGUF file in wllama (compat build, one thread, CPU). */
export async function loadWllama(ggufPath: string, params: LoadModelParams = {}): Promise<WllamaNode> {
  installBrowserStubs();
  const { Wllama } = await import('@wllama/wllama/esm/index.js');
  // WLLAMA_LOG=1 shows llama.cpp's own log (model loading, backend, timings).
  const verbose = process.env.WLLAMA_LOG === '1';
  const quiet = { debug: () => {}, log: () => {}, warn: () => {}, error: console.error };
  const wllama = new Wllama(
    { default: pathToFileURL(join(WLLAMA_DIR, 'wllama.wasm')).href },
    {
      logger: verbose ? console : quiet,
      suppressNativeLog: !verbose,
      // Models come in as Blobs: its download cache (OPFS, absent in Node) is never used.
      cacheManager: {} as never,
      modelManager: {} as never,
    },
  );
  wllama.setCompat({
    worker: { code: readFileSync(join(COMPAT_DIR, 'wllama.js'), 'utf8') },
    wasm: pathToFileURL(join(COMPAT_DIR, 'wllama.wasm')).href,
  } as never);
  const blob = await openAsBlob(ggufPath);
  await wllama.loadModel([blob], {
    n_ctx: 1024,
    n_batch: 512,
    n_threads: 1,
    n_gpu_layers: 0,
    n_parallel: 1,
    ...params,
  });
  // A model llama.cpp rejects still resolves loadModel(); the reason is only in its log (WLLAMA_LOG=1).
  if (!(wllama.getLoadedContextInfo() as { success?: boolean }).success) {
    await wllama.exit();
    throw new Error(`wllama could not load ${ggufPath} (run with WLLAMA_LOG=1 for llama.cpp's reason)`);
  }
  return {
    wllama,
    async greedy(prompt, maxTokens, { bannedIds = [] } = {}) {
      // llama-server's completion task under the hood (its prompt must be text). top_k 1 is argmax;
      // logprobs makes it report each generated token's id; [id, false] is a bias of -infinity.
      const res = (await wllama.createCompletion({
        prompt,
        max_tokens: maxTokens,
        temperature: 0,
        top_k: 1,
        ignore_eos: true,
        logprobs: 1,
        // Probabilities after sampling: with top_k 1 just the chosen token. (The raw top tokens may be
        // banned ones, whose invalid UTF-8 breaks the response as above.)
        post_sampling_probs: true,
        // Every run prefills its prompt: no reuse of the previous request's KV.
        cache_prompt: false,
        logit_bias: bannedIds.map((id) => [id, false]),
      } as never)) as unknown as {
        choices: { logprobs: { content: { id: number }[] } | null }[];
        timings?: { prompt_n: number; predicted_per_second: number };
      };
      const content = res.choices[0]?.logprobs?.content;
      if (!content) throw new Error('wllama: no token ids in the completion (logprobs missing)');
      return {
        ids: content.map((c) => c.id),
        promptTokens: res.timings?.prompt_n ?? NaN,
        decodeTokPerS: res.timings?.predicted_per_second ?? NaN,
      };
    },
    exit: () => wllama.exit(),
  };
}

// Durable session KV in workerd: `wrangler dev` serving `tiny` (as the service section does), one shard. A
// history's full blocks are stored in the object's SQLite after its request; the next request over that
// history is timed while the object still holds it (cached), after a restart of the server (restored from
// SQLite), and against a history of the same length nothing holds (rebuilt by prefill) and a fresh 20-token
// prompt. Non-streamed, max_tokens 1: the latency is the time to the first token plus one response. After
// each restart one request loads the model and restores another stored history, untimed.
// (bench-135m is not used here: loaded through MODEL_URL under wrangler dev 4.86, workerd fails with
// "Too many open files" while the weights stream in; see docs/benchmarks.md.)
import { startDevServer, type DevServer } from '../../test/e2e/helpers/wrangler.js';
import { promptIds } from './engine-runs.js';
import type { ServiceRestoreResult } from './results.js';
import { ratioByRun, sampled } from './stats.js';

const TURN = 20;
const VOCAB = 512;

async function complete(server: DevServer, prompt: number[]): Promise<{ ms: number; cached: number }> {
  const t0 = performance.now();
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0, ignore_eos: true }),
  });
  const body = (await res.json()) as { usage?: { prompt_tokens_details: { cached_tokens: number } } };
  if (!res.ok || !body.usage) throw new Error(`service answered ${res.status}: ${JSON.stringify(body)}`);
  return { ms: performance.now() - t0, cached: body.usage.prompt_tokens_details.cached_tokens };
}

/** Waits until the shard has written what it had queued. */
async function settled(server: DevServer): Promise<void> {
  for (let i = 0; i < 300; i++) {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const pending = text.split('\n').find((l) => l.startsWith('edge_infer_kv_store_pending_chains{'));
    if (pending && Number(pending.split(' ').at(-1)) === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('the shard never finished writing its KV blocks');
}

export async function runServiceRestore(
  histories: number[],
  runs: number,
  log: (s: string) => void,
): Promise<ServiceRestoreResult> {
  const vars = { SHARD_COUNT: '1' };
  let server = await startDevServer(vars);
  const samples = new Map<string, number[]>();
  const add = (k: string, x: number): void => void samples.set(k, [...(samples.get(k) ?? []), x]);
  try {
    await complete(server, promptIds(8, 1, 0, VOCAB)); // loads the model
    for (let run = -1; run < runs; run++) {
      for (const h of histories) {
        const seed = 1_000 + (run + 1) * 100 + h;
        const history = promptIds(h, seed, 0, VOCAB);
        // Restored after the restart first, untimed: a new isolate runs its first restore cold (JIT, SQL).
        const warm = promptIds(64, seed, 5, VOCAB);
        await complete(server, warm);
        await complete(server, history);
        // Each timed request waits for the writes before it: on one thread they would delay it, and that is not the restore.
        await settled(server);
        const cached = await complete(server, [...history, ...promptIds(TURN, seed, 1, VOCAB)]);
        await settled(server);
        await server.stop();
        server = await startDevServer(vars, server.persistDir);
        await complete(server, [...warm, ...promptIds(8, seed, 9, VOCAB)]); // loads the model and restores once
        await settled(server);
        const restored = await complete(server, [...history, ...promptIds(TURN, seed, 2, VOCAB)]);
        if (restored.cached < h - 16) throw new Error(`only ${restored.cached} of ${h} history tokens were restored`);
        await settled(server);
        const rebuilt = await complete(server, promptIds(h + TURN, seed, 3, VOCAB));
        await settled(server);
        const fresh = await complete(server, promptIds(TURN, seed, 4, VOCAB));
        if (run < 0) continue;
        add(`${h}:cached`, cached.ms);
        add(`${h}:restored`, restored.ms);
        add(`${h}:rebuilt`, rebuilt.ms);
        add(`${h}:fresh`, fresh.ms);
        log(
          `service restore: run ${run + 1}/${runs}, history ${h}: cached ${cached.ms.toFixed(0)} ms, restored ${restored.ms.toFixed(0)} ms, rebuilt ${rebuilt.ms.toFixed(0)} ms, fresh ${fresh.ms.toFixed(0)} ms`,
        );
      }
    }
  } finally {
    await server.stop();
  }
  const byHistory: ServiceRestoreResult['byHistory'] = {};
  for (const h of histories) {
    const get = (k: string): number[] => samples.get(`${h}:${k}`) ?? [];
    byHistory[h] = {
      cachedMs: sampled(get('cached')),
      restoredMs: sampled(get('restored')),
      rebuiltMs: sampled(get('rebuilt')),
      freshMs: sampled(get('fresh')),
      rebuiltVsRestored: ratioByRun(get('rebuilt'), get('restored')),
      restoredVsFresh: ratioByRun(get('restored'), get('fresh')),
    };
  }
  return { model: 'tiny fp32 (edge kernels, fp32 KV)', byHistory };
}

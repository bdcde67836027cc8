// Four shards in one isolate (`wrangler dev` puts every object of the class in one, as Cloudflare may): all
// four load, share one copy of the weights and serve 16 concurrent streams; the isolate, read through the
// inspector as Cloudflare counts it, stays within MEMORY_BUDGET_MB and within what the budget counts; tokens
// are the engine's alone in Node; no promise or I/O object crosses from one object's request to another's.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeIsolateMemory, IsolateMemoryProbe } from '../../scripts/lib/isolate-memory.js';
import { nodeRuntime } from '../../scripts/lib/runtimes.js';
import { Engine } from '../../src/engine/engine.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { collect, modelDir } from '../helpers/engines.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const BUDGET_MB = 24;
let server: DevServer;

beforeAll(async () => {
  server = await startDevServer({ SHARD_COUNT: '4', MODEL_DTYPE: 'q4', MEMORY_BUDGET_MB: String(BUDGET_MB) });
});
afterAll(async () => {
  await server?.stop();
});

async function metrics(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await (await fetch(`${server.url}/metrics`)).text()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    out.set(line.slice(0, line.lastIndexOf(' ')), Number(line.slice(line.lastIndexOf(' ') + 1)));
  }
  return out;
}

const shardValue = (m: Map<string, number>, name: string, shard: number) =>
  m.get(`${name}{shard="${shard}",model="tiny"}`);

it('four shards load, share the weights and serve 16 streams with the tokens of an engine alone, within the budget', async () => {
  for (let i = 0; i < 200; i++) {
    const m = await metrics();
    if ([0, 1, 2, 3].every((s) => shardValue(m, 'edge_infer_engine_loaded', s) === 1)) break;
    const res = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: `Load ${i}`, max_tokens: 1 }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
  }
  const loaded = await metrics();
  for (const s of [0, 1, 2, 3]) {
    expect(shardValue(loaded, 'edge_infer_engine_loaded', s)).toBe(1);
    expect(shardValue(loaded, 'edge_infer_isolate_objects', s)).toBe(4);
  }

  const requests = Array.from({ length: 16 }, (_, i) => ({
    prompt: `Stream ${i} about the sea`,
    max_tokens: 24,
    ignore_eos: true,
    ...(i % 2 ? { temperature: 0.9, seed: i } : { temperature: 0 }),
  }));
  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('tiny')), { dtype: 'q4' });
  const expected: string[] = [];
  for (const r of requests) expected.push((await collect(engine, r)).done.text);
  await engine.runner.release();
  const texts = await Promise.all(
    requests.map(async (r) => {
      const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: JSON.stringify(r) });
      expect(res.status, await res.clone().text()).toBe(200);
      return ((await res.json()) as { choices: { text: string }[] }).choices[0].text;
    }),
  );
  expect(texts).toEqual(expected);

  const probe = await IsolateMemoryProbe.open(server);
  try {
    const measured = await probe.measure();
    const counted = shardValue(await metrics(), 'edge_infer_isolate_counted_bytes', 0)!;
    // One WebAssembly memory for the kernels of all four shards (and xgrammar's, where a grammar ran).
    expect(measured.wasmMemories.length, describeIsolateMemory(measured)).toBeLessThanOrEqual(2);
    expect(measured.totalBytes, describeIsolateMemory(measured)).toBeLessThanOrEqual(counted);
    expect(counted).toBeLessThanOrEqual(BUDGET_MB * 2 ** 20);
  } finally {
    probe.close();
  }
  expect(server.log()).not.toMatch(/different request|Cannot perform I\/O on behalf/);
});

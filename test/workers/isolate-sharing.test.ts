// Inside workerd, where every shard of the InferenceObject class runs in one isolate (as `wrangler dev` and,
// at times, Cloudflare put them): the shards load the weights once between them, each keeps a pool of its
// own, and the isolate's counted memory stays within MEMORY_BUDGET_MB.
import { expect, it } from 'vitest';
import { post, scrape } from './service-helpers.js';

const metric = (m: Map<string, number>, name: string, shard: number): number | undefined =>
  m.get(`${name}{shard="${shard}",model="tiny"}`);

it('loads the weights once for both shards, each with its own pool, within the isolate budget', async () => {
  // Prompts hash to shards by their prefix: send distinct ones until both shards have loaded.
  for (let i = 0; i < 64; i++) {
    const m = await scrape();
    if (metric(m, 'edge_infer_engine_loaded', 0) === 1 && metric(m, 'edge_infer_engine_loaded', 1) === 1) break;
    const res = await post('/v1/completions', { prompt: `Prompt number ${i} of many`, max_tokens: 1 });
    expect(res.status, await res.text()).toBe(200);
  }
  const m = await scrape();
  for (const shard of [0, 1]) expect(metric(m, 'edge_infer_engine_loaded', shard)).toBe(1);
  // One linear memory: both shards see the same one, and the isolate counts two objects sharing it.
  expect(metric(m, 'edge_infer_wasm_memory_bytes', 0)).toBe(metric(m, 'edge_infer_wasm_memory_bytes', 1));
  for (const shard of [0, 1]) {
    expect(metric(m, 'edge_infer_isolate_objects', shard)).toBe(2);
    expect(metric(m, 'edge_infer_kv_pool_bytes', shard)).toBeGreaterThan(0);
    expect(metric(m, 'edge_infer_isolate_counted_bytes', shard)).toBeLessThanOrEqual(128 * 2 ** 20);
  }
  const pools = [0, 1].map((s) => metric(m, 'edge_infer_kv_pool_bytes', s)!);
  // Counted: at least both pools on top of the one copy of the weights (the kernels' memory holds both pools too).
  expect(metric(m, 'edge_infer_isolate_counted_bytes', 0)).toBeGreaterThan(pools[0] + pools[1]);
  expect(metric(m, 'edge_infer_wasm_memory_bytes', 0)).toBeGreaterThan(pools[0] + pools[1]);
});

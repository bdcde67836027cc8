// /metrics over real HTTP, and a client that disconnects mid-stream: its request is cancelled and the
// KV cache gauges return to where they were.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

let server: DevServer;
beforeAll(async () => {
  server = await startDevServer();
});
afterAll(() => server?.stop());

/** Sums a metric over every label set (shards) that contains `labels` (e.g. `finish_reason="cancelled"`). */
async function metric(name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const match = line.match(/^([a-z_]+)(\{[^}]*\})? ([-0-9.e+]+)$/);
    if (match && match[1] === name && (match[2] ?? '').includes(labels)) sum += Number(match[3]);
  }
  return sum;
}

/** Each label set's (shard's) values of `names`, in order; label sets missing any are left out. */
async function byShard(names: string[]): Promise<number[][]> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const shards = new Map<string, number[]>();
  for (const line of text.split('\n')) {
    const match = line.match(/^([a-z_]+)(\{[^}]*\})? ([-0-9.e+]+)$/);
    const i = match ? names.indexOf(match[1]) : -1;
    if (i < 0) continue;
    const values = shards.get(match![2] ?? '') ?? [];
    values[i] = Number(match![3]);
    shards.set(match![2] ?? '', values);
  }
  return [...shards.values()].filter((v) => names.every((_, i) => v[i] !== undefined));
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('metrics', () => {
  // First in the file, so on a server nothing has asked to generate yet.
  it('/v1/models names the runner before any shard has loaded the model', async () => {
    expect(await metric('edge_infer_engine_loaded')).toBe(0);
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { runner: string | null }[] };
    // Planned from tiny's config.json and its fp32 weights: a Llama graph on workerd's kernels.
    expect(models.data[0].runner).toBe('kernels');
    // Planning read no weights and loaded no engine.
    expect(await metric('edge_infer_engine_loaded')).toBe(0);
  });

  it('exports Prometheus text with the engine and request metrics', async () => {
    await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'tiny', prompt: 'warm up', max_tokens: 4 }),
    });
    const res = await fetch(`${server.url}/metrics`);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await res.text();
    for (const name of [
      'edge_infer_time_to_first_token_seconds_bucket',
      'edge_infer_inter_token_latency_seconds_count',
      'edge_infer_prompt_tokens_total',
      'edge_infer_generation_tokens_total',
      'edge_infer_kv_blocks_used',
      'edge_infer_prefix_cache_hit_tokens_total',
      'edge_infer_preemptions_total',
      'edge_infer_queue_depth',
      'edge_infer_running_requests',
    ]) {
      expect(text, name).toContain(name);
    }
    expect(await metric('edge_infer_generation_tokens_total')).toBeGreaterThanOrEqual(4);
    // Each shard's pool capacity in tokens: its blocks times their size, and its bytes over a token's.
    const shards = await byShard([
      'edge_infer_kv_pool_tokens',
      'edge_infer_kv_blocks_total',
      'edge_infer_kv_block_size_tokens',
      'edge_infer_kv_pool_bytes',
      'edge_infer_kv_bytes_per_token',
    ]);
    expect(shards.length).toBeGreaterThan(0);
    for (const [tokens, blocks, blockSize, bytes, perToken] of shards) {
      expect(tokens).toBeGreaterThan(0);
      expect(tokens).toBe(blocks * blockSize);
      expect(tokens).toBe(bytes / perToken);
    }
  });

  it('a client that disconnects mid-stream cancels its request and the KV gauges return', async () => {
    const baseline = await metric('edge_infer_kv_blocks_used');
    const cancelledBefore = await metric('edge_infer_requests_total', 'finish_reason="cancelled"');
    // A raw socket that is destroyed mid-stream, as a client that goes away does (4 × 2000 tokens take
    // seconds even on tiny, so the disconnect lands while they are generated).
    const body = JSON.stringify({
      model: 'tiny',
      messages: [{ role: 'user', content: 'Talk for a long time.' }],
      n: 4,
      max_tokens: 2000,
      ignore_eos: true,
      stream: true,
    });
    const req = request(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
    });
    const firstChunk = new Promise<void>((resolve, reject) => {
      req.on('response', (res) => res.once('data', () => resolve()));
      req.on('error', reject);
    });
    req.end(body);
    await firstChunk; // the stream is running
    await until(async () => (await metric('edge_infer_running_requests')) === 4, 'the requests to run');
    expect(await metric('edge_infer_kv_blocks_used')).toBeGreaterThan(baseline);
    req.destroy();
    await until(async () => (await metric('edge_infer_running_requests')) === 0, 'the request to be cancelled');
    expect(await metric('edge_infer_requests_total', 'finish_reason="cancelled"')).toBe(cancelledBefore + 4);
    expect(await metric('edge_infer_kv_blocks_used')).toBe(baseline);
  });
});

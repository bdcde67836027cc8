// Client disconnects cancel the engine request (its KV blocks return to the pool), and GET /metrics
// exposes every shard's counters, gauges and latency histograms in Prometheus text.
import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { shardCount } from '../../src/worker/routing.js';
import type { Env } from '../../src/env.js';
import { describe, expect, it } from 'vitest';
import { call, post, postJson, readSse, scrape, sleep, total } from './service-helpers.js';
import type { ChatCompletion, CompletionChunk } from './openai-wire.js';

const long = { prompt: 'A long story begins', max_tokens: 2000, ignore_eos: true, temperature: 0 };

/** Polls /metrics until `ok` holds (the cancel is asynchronous: it lands at the engine's next step). */
async function until(ok: (m: Map<string, number>) => boolean, ms = 10_000): Promise<Map<string, number>> {
  const end = Date.now() + ms;
  for (;;) {
    const m = await scrape();
    if (ok(m) || Date.now() > end) return m;
    await sleep(20);
  }
}

const cancelled = (m: Map<string, number>) =>
  [...m]
    .filter(([k]) => k.startsWith('edge_infer_requests_total{') && k.includes('finish_reason="cancelled"'))
    .reduce((s, [, v]) => s + v, 0);

describe('client disconnect', () => {
  it('cancelling a stream mid-way cancels the request and returns the KV blocks', async () => {
    await postJson('/v1/completions', { ...long, max_tokens: 2 }); // load the shard's engine first
    const before = await scrape();
    const res = await post('/v1/completions', { ...long, stream: true });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    for (let i = 0; i < 3; i++) expect((await reader.read()).done).toBe(false);
    const during = await scrape();
    expect(total(during, 'edge_infer_running_requests')).toBe(1);
    expect(total(during, 'edge_infer_kv_blocks_used')).toBeGreaterThan(total(before, 'edge_infer_kv_blocks_used'));

    await reader.cancel();
    const after = await until((m) => cancelled(m) > cancelled(before) && total(m, 'edge_infer_running_requests') === 0);
    expect(cancelled(after)).toBe(cancelled(before) + 1);
    expect(total(after, 'edge_infer_running_requests')).toBe(0);
    expect(total(after, 'edge_infer_kv_blocks_used')).toBe(total(before, 'edge_infer_kv_blocks_used'));
    expect(
      total(after, 'edge_infer_kv_blocks_used') +
        total(after, 'edge_infer_kv_blocks_free') +
        total(after, 'edge_infer_kv_blocks_cached_idle'),
    ).toBe(total(after, 'edge_infer_kv_blocks_total'));
    // It stopped early: far fewer tokens than the 2000 asked for.
    expect(
      total(after, 'edge_infer_generation_tokens_total') - total(before, 'edge_infer_generation_tokens_total'),
    ).toBeLessThan(1500);
  });

  it('a chat stream with n = 2 cancels both choices', async () => {
    const before = await scrape();
    const res = await post('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Go on' }],
      n: 2,
      max_tokens: 1500,
      ignore_eos: true,
      stream: true,
    });
    const reader = res.body!.getReader();
    for (let i = 0; i < 4; i++) await reader.read();
    await reader.cancel();
    const after = await until(
      (m) => cancelled(m) >= cancelled(before) + 2 && total(m, 'edge_infer_running_requests') === 0,
    );
    expect(cancelled(after)).toBe(cancelled(before) + 2);
    expect(total(after, 'edge_infer_kv_blocks_used')).toBe(total(before, 'edge_infer_kv_blocks_used'));
  });

  it('aborting a non-streamed request cancels it too', async () => {
    const before = await scrape();
    const abort = new AbortController();
    const res = call('/v1/completions', { method: 'POST', body: JSON.stringify(long), signal: abort.signal }).catch(
      (e: unknown) => e,
    );
    await until((m) => total(m, 'edge_infer_running_requests') >= 1, 5_000);
    abort.abort();
    await res;
    const after = await until((m) => cancelled(m) > cancelled(before), 10_000);
    expect(cancelled(after)).toBeGreaterThanOrEqual(cancelled(before) + 1);
  });

  it('the service answers normally afterwards', async () => {
    const { events, done } = await readSse<CompletionChunk>(
      await post('/v1/completions', { ...long, max_tokens: 4, stream: true }),
    );
    expect(done).toBe(true);
    expect(events.at(-1)!.choices[0].finish_reason).toBe('length');
  });
});

describe('an object that restarts mid-stream', () => {
  it('ends the stream with an error instead of leaving the client waiting', async () => {
    const res = await post('/v1/completions', { ...long, stream: true });
    const reader = res.body!.getReader();
    for (let i = 0; i < 3; i++) expect((await reader.read()).done).toBe(false);
    // Abort every shard's object as an eviction or a redeploy would, while it is generating.
    for (let shard = 0; shard < shardCount(env as unknown as Env); shard++) {
      const stub = env.INFERENCE.get(env.INFERENCE.idFromName(`shard-${shard}`));
      await runInDurableObject(stub, (_instance, state) => state.abort('test: restart')).catch(() => {});
    }
    let text = '';
    const decoder = new TextDecoder();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
      text += decoder.decode(chunk.value, { stream: true });
    expect(text.slice(-400)).toContain('"code":"shard_restarted"');
    expect(text).not.toContain('[DONE]');
  });
});

describe('GET /metrics', () => {
  it('counts a request with n choices once for its prompt and once per choice for what it generated', async () => {
    const before = await scrape();
    const body = await postJson<ChatCompletion>('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Count me' }],
      n: 3,
      max_tokens: 4,
      ignore_eos: true,
    });
    const after = await scrape();
    const delta = (name: string) => total(after, name) - total(before, name);
    expect(delta('edge_infer_prompt_tokens_total')).toBe(body.usage.prompt_tokens);
    expect(delta('edge_infer_generation_tokens_total')).toBe(body.usage.completion_tokens);
    expect(delta('edge_infer_time_to_first_token_seconds_count')).toBe(1);
  });

  it('exposes counters, gauges and histograms per shard', async () => {
    await postJson('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Measure me' }],
      max_tokens: 5,
      ignore_eos: true,
    });
    const res = await call('/metrics');
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    for (const [name, type] of [
      ['edge_infer_time_to_first_token_seconds', 'histogram'],
      ['edge_infer_inter_token_latency_seconds', 'histogram'],
      ['edge_infer_prompt_tokens_total', 'counter'],
      ['edge_infer_generation_tokens_total', 'counter'],
      ['edge_infer_prefix_cache_hit_tokens_total', 'counter'],
      ['edge_infer_preemptions_total', 'counter'],
      ['edge_infer_kv_blocks_used', 'gauge'],
      ['edge_infer_kv_blocks_total', 'gauge'],
      ['edge_infer_queue_depth', 'gauge'],
      ['edge_infer_running_requests', 'gauge'],
    ]) {
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
    }
    const m = await scrape();
    expect(m.has('edge_infer_engine_loaded{shard="0",model="tiny"}')).toBe(true);
    expect(m.has('edge_infer_engine_loaded{shard="1",model="tiny"}')).toBe(true);
    // A loaded shard's TTFT histogram: cumulative buckets ending in +Inf == _count.
    const shard = [0, 1].find((s) => m.get(`edge_infer_engine_loaded{shard="${s}",model="tiny"}`) === 1)!;
    const labels = `shard="${shard}",model="tiny"`;
    const count = m.get(`edge_infer_time_to_first_token_seconds_count{${labels}}`)!;
    expect(count).toBeGreaterThan(0);
    expect(m.get(`edge_infer_time_to_first_token_seconds_bucket{${labels},le="+Inf"}`)).toBe(count);
    const buckets = [...m]
      .filter(([k]) => k.startsWith(`edge_infer_time_to_first_token_seconds_bucket{${labels},`))
      .map(([, v]) => v);
    expect([...buckets].sort((a, b) => a - b)).toEqual(buckets);
    expect(m.get(`edge_infer_inter_token_latency_seconds_count{${labels}}`)).toBeGreaterThan(0);
    expect(m.get(`edge_infer_kv_blocks_total{${labels}}`)).toBeGreaterThan(0);
    expect(total(m, 'edge_infer_generation_tokens_total')).toBeGreaterThanOrEqual(5);
  });
});

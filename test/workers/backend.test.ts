// Backend choice inside workerd: there is no navigator.gpu, so BACKEND=auto (the default) resolves to
// wasm, and /v1/models and /metrics say so; the engine runs (and so is loaded) on our edge kernels.
import { describe, expect, it } from 'vitest';
import { call, postJson, scrape } from './service-helpers.js';

describe('backend choice in workerd', () => {
  it('has no WebGPU, so auto is wasm in /v1/models and /metrics', async () => {
    expect((globalThis as { navigator?: { gpu?: unknown } }).navigator?.gpu).toBeUndefined();
    const models = (await (await call('/v1/models')).json()) as { data: { backend: string }[] };
    expect(models.data[0].backend).toBe('wasm');
    expect(((await (await call('/v1/models/tiny')).json()) as { backend: string }).backend).toBe('wasm');
    await postJson('/v1/completions', { prompt: 'Hi', max_tokens: 2, temperature: 0 });
    const metrics = await scrape();
    const info = [...metrics].filter(([k]) => k.startsWith('edge_infer_backend_info{'));
    expect(info.length).toBeGreaterThan(0);
    for (const [key, value] of info) {
      expect(key).toContain('backend="wasm"');
      expect(value).toBe(1);
    }
    // The shard that served the request runs our kernels, and says so on /metrics and /v1/models, and how
    // much linear memory they hold.
    expect(info.some(([key]) => key.includes('runner="kernels"'))).toBe(true);
    expect(((await (await call('/v1/models')).json()) as { data: { runner: string }[] }).data[0].runner).toBe(
      'kernels',
    );
    expect(((await (await call('/v1/models/tiny')).json()) as { runner: string }).runner).toBe('kernels');
    const memory = [...metrics].filter(([k]) => k.startsWith('edge_infer_wasm_memory_bytes{'));
    expect(memory.length).toBeGreaterThan(0);
    // Weights (tiny: 0.5 MiB) + the KV pool (KV_CACHE_MB, 16) + at most 16 MiB besides: the footprint rule, in workerd.
    for (const [, bytes] of memory) {
      expect(bytes).toBeGreaterThan(16 * 2 ** 20);
      expect(bytes).toBeLessThanOrEqual((0.5 + 16 + 16) * 2 ** 20);
    }
  });
});

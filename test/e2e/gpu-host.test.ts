// A GPU host under real workerd: `wrangler dev` with GPU_HOST_URL pointing at a real host process (scripts/gpu-host.ts,
// here on our kernels: no GPU on this machine). A greedy completion over HTTP through the host equals the same
// completion on the object's own kernels, token for token; the object holds no weights; the host killed mid-stream
// ends that stream with a 503-class error, a request while it is down gets a 503 with Retry-After, other routes
// answer, and once the host is back at its address the object reconnects and serves the same tokens.
import { createParser } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/lib/free-port.js';
import { startGpuHostProcess, type GpuHostProcess } from '../../scripts/lib/gpu-host-process.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const VARS = { MODEL: 'tiny', MODEL_DTYPE: 'q4', SHARD_COUNT: '1' };
const SECRET = `e2e-${process.pid}-secret`;
const prompts = ['Once upon a time', 'The sea was calm', 'A dog and a cat'];
const LONG = 1200;
// Past two 16-token blocks: its full blocks go to the object's durable store, read back from the host.
const STORED =
  'The sea was calm and the sky was grey when the old ship left the harbour at dawn, and nobody on the shore';

let server: DevServer;
let host: GpuHostProcess;
let hostPort: number;
const reference = new Map<string, { text: string; tokens: string[] }>();

const startHost = () =>
  startGpuHostProcess({ model: 'tiny', dtype: 'q4', backend: 'kernels', port: hostPort, secret: SECRET });

async function complete(url: string, prompt: string, max_tokens = 48) {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt, max_tokens, temperature: 0, ignore_eos: true, logprobs: 0 }),
  });
  const body = (await res.json()) as { choices: { text: string; logprobs: { tokens: string[] } }[] };
  expect(res.status, JSON.stringify(body)).toBe(200);
  return { text: body.choices[0].text, tokens: body.choices[0].logprobs.tokens };
}

async function metrics(): Promise<string> {
  return (await fetch(`${server.url}/metrics`)).text();
}

const metric = (text: string, name: string): number[] =>
  text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .map((l) => Number(l.split(' ').at(-1)));

async function until(check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 15_000; !(await check()); ) {
    if (Date.now() > deadline) throw new Error('not within 15 s');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

beforeAll(async () => {
  // The reference: the same completions on the object's own kernels, in workerd.
  const local = await startDevServer(VARS);
  try {
    for (const prompt of prompts) reference.set(prompt, await complete(local.url, prompt));
    reference.set('long', await complete(local.url, prompts[0], LONG));
    reference.set(STORED, await complete(local.url, STORED, 8));
  } finally {
    await local.stop();
  }
  hostPort = await freePort();
  host = await startHost();
  server = await startDevServer({ ...VARS, GPU_HOST_URL: host.url, GPU_HOST_SECRET: SECRET });
});

afterAll(async () => {
  await server?.stop();
  await host?.stop();
});

describe('an object whose model runs on a GPU host', () => {
  it("answers with its own kernels' tokens, batched, names the host and holds no weights", async () => {
    const got = await Promise.all(prompts.map((p) => complete(server.url, p)));
    expect(got).toEqual(prompts.map((p) => reference.get(p)));
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as {
      data: { runner: string; backend: string; weights: { shared: string }; gpu_host: unknown }[];
    };
    expect(models.data[0]).toMatchObject({
      runner: 'kernels',
      backend: 'wasm',
      weights: { shared: 'on the GPU host' },
      gpu_host: { runner: 'kernels', backend: 'wasm', adapter: null, connected: true },
    });
    const text = await metrics();
    expect(text).toMatch(/edge_infer_gpu_host_info\{[^}]*runner="kernels",backend="wasm",adapter=""\} 1/);
    expect(metric(text, 'edge_infer_gpu_host_passes_total')[0]).toBeGreaterThan(40);
    // No kernels' memory in the object: the weights and the KV bytes are the host's.
    expect(metric(text, 'edge_infer_wasm_memory_bytes')).toEqual([]);
    expect(host.banner).toMatch(/serving tiny \(q4\) on http:\/\/127\.0\.0\.1:\d+: runner kernels on wasm/);
  });

  it('ends a stream with a 503 error when the host dies, answers 503 + Retry-After while it is down, and recovers', async () => {
    // Its full blocks read from the host into the object's durable store (once its last event is out).
    expect(await complete(server.url, STORED, 8)).toEqual(reference.get(STORED));
    await until(async () => metric(await metrics(), 'edge_infer_kv_store_blocks')[0] > 0);
    const res = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tiny',
        prompt: prompts[0],
        max_tokens: LONG,
        temperature: 0,
        ignore_eos: true,
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    const events: Record<string, unknown>[] = [];
    let killed = false;
    const parser = createParser({
      onEvent: (e) => {
        if (e.data !== '[DONE]') events.push(JSON.parse(e.data));
      },
    });
    const decoder = new TextDecoder();
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
      if (!killed && events.length >= 10) {
        killed = true;
        await host.kill();
      }
    }
    const last = events.at(-1) as { error?: { code: string; type: string; message: string } };
    expect(events.length).toBeLessThan(LONG);
    expect(last.error).toMatchObject({ code: 'gpu_host_unavailable', type: 'server_error' });
    expect(last.error!.message).toMatch(/GPU host at 127\.0\.0\.1:\d+ cannot be reached/);

    // While it is down: a request gets a 503 in OpenAI's schema with Retry-After; other routes answer.
    const down = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt: 'Hello', max_tokens: 4, temperature: 0 }),
    });
    const body = (await down.json()) as { error: { code: string; type: string; param: unknown; message: string } };
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('5');
    expect(body.error).toMatchObject({ code: 'gpu_host_unavailable', type: 'server_error', param: null });
    const session = await fetch(`${server.url}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ system: 'be brief' }),
    });
    expect(session.status).toBe(201);
    expect((await fetch(`${server.url}/v1/models`)).status).toBe(200);
    expect(metric(await metrics(), 'edge_infer_gpu_host_failures_total')[0]).toBeGreaterThan(0);

    // Back at its address: the object opens a new session there and serves the same tokens.
    host = await startHost();
    expect(await complete(server.url, prompts[1])).toEqual(reference.get(prompts[1]));
    expect(await complete(server.url, prompts[0], LONG)).toEqual(reference.get('long'));
    // The stored blocks restored into the new session (written to the host with the pass): the same tokens.
    expect(await complete(server.url, STORED, 8)).toEqual(reference.get(STORED));
    const text = await metrics();
    expect(metric(text, 'edge_infer_kv_restored_blocks_total')[0]).toBeGreaterThan(0);
    // (Reconnects are counted per object instance, and wrangler dev may have evicted this one while it idled:
    // test/gpu-host.test.ts counts them.)
    expect(text).toMatch(/edge_infer_gpu_host_info\{[^}]*\} 1/);
  });
});

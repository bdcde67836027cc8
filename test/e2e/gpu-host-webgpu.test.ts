// A GPU host on WebGPU (Dawn on lavapipe here: Mesa's software Vulkan; a real GPU elsewhere) serving wrangler dev's
// objects: a greedy completion over HTTP equals the Node CLI's `--backend webgpu` on the same folder, and
// /v1/models and /metrics name the runner, the backend and the adapter.
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/lib/free-port.js';
import { startGpuHostProcess, type GpuHostProcess } from '../../scripts/lib/gpu-host-process.js';
import { probeGpuAdapter } from '../../scripts/lib/gpu-probe.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

// As test/webgpu: without an adapter (no Vulkan driver) this skips with the reason in its title, except in CI or
// with EDGE_INFER_REQUIRE_WEBGPU=1, where it fails.
const adapter = probeGpuAdapter().kind !== 'none' || !!process.env.CI || !!process.env.EDGE_INFER_REQUIRE_WEBGPU;

const SECRET = `e2e-webgpu-${process.pid}`;
const prompts = ['Once upon a time', 'The sea was calm'];
const MAX_TOKENS = 16;

let server: DevServer;
let host: GpuHostProcess;
const reference = new Map<string, { text: string; finish_reason: string }>();

/** The CLI's greedy text on WebGPU, in a process of its own (as a user runs it). */
function cli(prompt: string): { text: string; finish_reason: string } {
  const run = spawnSync(
    'npx',
    ['tsx', 'scripts/generate.ts', '--model', 'models/tiny', '--backend', 'webgpu', '--dtype', 'fp32'].concat([
      '--prompt',
      prompt,
      '--max-tokens',
      String(MAX_TOKENS),
      '--temperature',
      '0',
      '--json',
    ]),
    { encoding: 'utf8', env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp' } },
  );
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as { text: string; finish_reason: string };
}

beforeAll(async () => {
  if (!adapter) return;
  // First, while nothing else runs: the CLI blocks this process while it runs (a kept-alive socket would go stale).
  for (const prompt of prompts) reference.set(prompt, cli(prompt));
  host = await startGpuHostProcess({
    model: 'tiny',
    dtype: 'fp32',
    backend: 'webgpu',
    port: await freePort(),
    secret: SECRET,
  });
  server = await startDevServer({
    MODEL: 'tiny',
    MODEL_DTYPE: 'fp32',
    SHARD_COUNT: '1',
    GPU_HOST_URL: host.url,
    GPU_HOST_SECRET: SECRET,
  });
});

afterAll(async () => {
  await server?.stop();
  await host?.stop();
});

describe.runIf(adapter)(`an object on a WebGPU host${adapter ? '' : ' (skipped: no WebGPU adapter)'}`, () => {
  it("answers with the CLI's --backend webgpu text and names the adapter", async () => {
    for (const prompt of prompts) {
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', prompt, max_tokens: MAX_TOKENS, temperature: 0 }),
      });
      const body = (await res.json()) as { choices: { text: string; finish_reason: string }[] };
      expect(res.status, JSON.stringify(body)).toBe(200);
      const want = reference.get(prompt)!;
      expect({ text: body.choices[0].text, finish_reason: body.choices[0].finish_reason }).toEqual({
        text: want.text,
        finish_reason: want.finish_reason,
      });
    }
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as {
      data: { backend: string; runner: string; gpu_host: { adapter: string; connected: boolean } }[];
    };
    expect(models.data[0]).toMatchObject({ backend: 'webgpu', runner: 'onnxruntime' });
    expect(models.data[0].gpu_host.connected).toBe(true);
    expect(models.data[0].gpu_host.adapter).toMatch(/llvmpipe|nvidia|amd|intel|apple/i);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/edge_infer_gpu_host_info\{[^}]*runner="onnxruntime",backend="webgpu",adapter="[^"]+"\} 1/);
  });
});

// MODEL_URL end to end: a GGUF folder (Q4_K_M, as model:import gguf writes it) on a plain static HTTP server,
// served by `wrangler dev` with MODEL=<name> and no MODEL_DTYPE: the object fetches config, tokenizer and
// model.gguf once each and streams the file into the kernels; greedy output over HTTP equals the engine's in
// Node on the same folder; /v1/models and /metrics say the kernels run it and that it came from the URL. The
// isolate, measured through the inspector as Cloudflare counts it, stays within what MEMORY_BUDGET_MB counts.
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeIsolateMemory, IsolateMemoryProbe } from '../../scripts/lib/isolate-memory.js';
import { sumMetric } from '../../scripts/lib/prometheus-text.js';
import { nodeRuntime } from '../../scripts/lib/runtimes.js';
import { startStaticServer, type StaticServer } from '../../scripts/lib/static-server.js';
import { Engine } from '../../src/engine/engine.js';
import { isolateFootprint } from '../../src/engine/runners/memory-budget.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { collect } from '../helpers/engines.js';
import { writeGgufFolder } from '../helpers/gguf-folder.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const NAME = 'gguf-by-url';
const REQUEST = { prompt: 'Hello', max_tokens: 16, temperature: 0, ignore_eos: true };
let dir: string;
let files: StaticServer;
let server: DevServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'model-url-'));
  await writeGgufFolder(join(dir, NAME));
  files = await startStaticServer(join(dir, NAME));
  server = await startDevServer({ MODEL: NAME, MODEL_URL: files.url, SHARD_COUNT: '1' });
});
afterAll(async () => {
  await server?.stop();
  await files?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('loads a GGUF folder from MODEL_URL onto the kernels, fetching each file once; greedy text equals Node', async () => {
  const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: JSON.stringify(REQUEST) });
  expect(res.status, await res.clone().text()).toBe(200);
  const body = (await res.json()) as { choices: { text: string }[]; usage: { completion_tokens: number } };
  const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(join(dir, NAME)));
  const { done } = await collect(engine, REQUEST);
  await engine.runner.release();
  expect(body.usage.completion_tokens).toBe(16);
  expect(body.choices[0].text).toBe(done.text);

  const weights = files.requests.filter((r) => r.path.endsWith('model.gguf') && r.method === 'GET');
  expect(weights).toHaveLength(1);
  expect(weights[0].bytesSent).toBe(statSync(join(dir, NAME, 'model.gguf')).size);
  // adapters/index.json (none here) is asked for once by /v1/models' listing and once by the load (the adapters' share).
  expect(files.requests.filter((r) => r.path.endsWith('adapters/index.json')).length).toBeLessThanOrEqual(2);
  // modules.json (none here) is read once by the load: the embeddings' pooling (docs/models.md).
  expect(files.requests.filter((r) => r.path.endsWith('modules.json')).length).toBeLessThanOrEqual(1);
  const paths = files.requests.map((r) => `${r.method} ${r.path}`).join(', ');
  expect(files.requests.length, paths).toBeLessThanOrEqual(11);

  const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { id: string; runner: string }[] };
  expect(models.data[0]).toMatchObject({ id: NAME, runner: 'kernels' });
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  expect(metrics).toMatch(/edge_infer_model_load_seconds\{[^}]*source="url"[^}]*\} \d/);
});

it('the isolate holds no more than the kernels’ memory plus the budget’s isolate part, after streams and a grammar', async () => {
  const body = (i: number) => ({ prompt: `Stream ${i}`, max_tokens: 24, temperature: 0.8, seed: i, stream: true });
  await Promise.all(
    Array.from({ length: 16 }, async (_, i) => {
      const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: JSON.stringify(body(i)) });
      await res.arrayBuffer();
    }),
  );
  const structured = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({
      prompt: 'A point:',
      max_tokens: 16,
      response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'object' } } },
    }),
  });
  expect(structured.status, await structured.clone().text()).toBe(200);
  const probe = await IsolateMemoryProbe.open(server);
  try {
    const measured = await probe.measure();
    const kernels = sumMetric(await (await fetch(`${server.url}/metrics`)).text(), 'edge_infer_wasm_memory_bytes');
    const config = JSON.parse(readFileSync(join(dir, NAME, 'config.json'), 'utf8')) as { vocab_size: number };
    const allowed = kernels + isolateFootprint(config.vocab_size, 16).bytes;
    expect(measured.wasmMemories[0]).toBe(kernels);
    expect(measured.totalBytes, describeIsolateMemory(measured)).toBeLessThanOrEqual(allowed);
  } finally {
    probe.close();
  }
});

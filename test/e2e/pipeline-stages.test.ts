// A model's layers on pipeline stages in real workerd: the head Worker (tokenizer, scheduler, block tables,
// embedding and output projection) and two stage Workers, each its own script and isolate, stage 2 in a
// `wrangler dev` process of its own (the dev registry connects them). Greedy text equals the one-process
// Node engine's on the same folder; killing stage 2's process mid-stream and bringing it back loses its KV,
// and the head recomputes: the stream goes on with the same tokens and nothing leaks. The folder is tiny-lora
// (the tiny preset with LoRA adapters): an adapter request batched with base ones gives the Node engine's text
// for that adapter, each stage applying its layers' part.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createParser } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writePipelineConfigs } from '../../scripts/lib/stage-configs.js';
import { collect, loadEngine } from '../helpers/engines.js';
import { startConfiguredServer, type DevServer } from './helpers/wrangler.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MODEL = 'tiny-lora';
const ADAPTER = 'all-r16';
const VARS = { MODEL, MODEL_DTYPE: 'q4' };
const prompts = ['Once upon a time', 'The sea was calm', 'A dog and a cat'];
const LONG = 1500;

let head: DevServer;
let stage2: DevServer;
const reference = new Map<string, string>();

// Its own names: the dev registry finds a stage by script name, and another pipeline may run on this machine.
const TAG = `e2e${process.pid}`;
let files: string[] = [];
const startStage2 = () => startConfiguredServer({}, undefined, { configs: [files[2]] });

beforeAll(async () => {
  files = writePipelineConfigs(ROOT, readFileSync(join(ROOT, 'wrangler.toml'), 'utf8'), 2, VARS, TAG);
  stage2 = await startStage2();
  head = await startConfiguredServer({ ...VARS, PIPELINE_STAGES: '2' }, undefined, {
    configs: [files[0], files[1]],
  });
  const engine = await loadEngine('kernels', MODEL, { dtype: 'q4' });
  for (const prompt of prompts)
    reference.set(
      prompt,
      (await collect(engine, { prompt, max_tokens: 48, temperature: 0, ignore_eos: true })).done.text,
    );
  const adapter = await engine.loadAdapter(ADAPTER);
  let adapted = '';
  for await (const e of engine.generate(
    { prompt: prompts[0], max_tokens: 48, temperature: 0, ignore_eos: true },
    { adapter },
  ))
    if (e.type === 'done') adapted = e.text;
  reference.set(ADAPTER, adapted);
  // Long enough that stage 2 is killed while it runs.
  const long = { prompt: prompts[0], max_tokens: LONG, temperature: 0, ignore_eos: true };
  reference.set('long', (await collect(engine, long)).done.text);
  await engine.runner.release();
});

afterAll(async () => {
  await head?.stop();
  await stage2?.stop();
  for (const file of files) rmSync(join(ROOT, file), { force: true });
});

async function complete(prompt: string, model = MODEL): Promise<string> {
  const res = await fetch(`${head.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: 48, temperature: 0, ignore_eos: true }),
  });
  const body = (await res.json()) as { choices: { text: string }[] };
  expect(res.status, JSON.stringify(body)).toBe(200);
  return body.choices[0].text;
}

async function metric(name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${head.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? Number.NaN : Number(line.split(' ').at(-1));
}

describe('a model on pipeline stages in workerd', () => {
  it('answers with the one-process engine text, batched with an adapter request, and shows each stage', async () => {
    const [adapted, ...texts] = await Promise.all([complete(prompts[0], ADAPTER), ...prompts.map((p) => complete(p))]);
    expect(texts).toEqual(prompts.map((p) => reference.get(p)));
    expect(adapted).toBe(reference.get(ADAPTER));
    expect(adapted).not.toBe(texts[0]);
    const models = (await (await fetch(`${head.url}/v1/models`)).json()) as {
      data: { stages: { layers: number[]; isolate_bytes: number }[] }[];
    };
    const { stages } = models.data[0];
    expect(stages.map((s) => s.layers)).toEqual([
      [0, 1],
      [1, 2],
    ]);
    expect(stages.every((s) => s.isolate_bytes > 0)).toBe(true);
    expect(await metric('edge_infer_stage_hops_total', 'stage="2"')).toBeGreaterThan(0);
  });

  it("goes on with the same tokens when stage 2's process is killed mid-stream and comes back", async () => {
    const res = await fetch(`${head.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        prompt: prompts[0],
        max_tokens: LONG,
        temperature: 0,
        ignore_eos: true,
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    let text = '';
    let chunks = 0;
    let restarted: Promise<void> | undefined;
    const errors: string[] = [];
    const parser = createParser({
      onEvent: (e) => {
        if (e.data === '[DONE]') return;
        const chunk = JSON.parse(e.data) as { choices?: { text: string }[]; error?: unknown };
        if (chunk.error) errors.push(JSON.stringify(chunk.error));
        text += chunk.choices?.[0]?.text ?? '';
        // kill() signals at once: the passes after this one find stage 2 gone.
        if (++chunks === 8)
          restarted = stage2.kill().then(async () => {
            stage2 = await startStage2();
          });
      },
    });
    const decoder = new TextDecoder();
    const reader = res.body!.getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read())
      parser.feed(decoder.decode(r.value, { stream: true }));
    await restarted;
    expect(errors).toEqual([]);
    expect(chunks).toBeGreaterThan(8);
    expect(text).toBe(reference.get('long'));
    expect(await metric('edge_infer_stage_restarts_total', 'stage="2"')).toBeGreaterThanOrEqual(1);
    // No block leaks: once the finished stream's blocks are stored (read back from the stages), none is held.
    await expect.poll(() => metric('edge_infer_kv_blocks_used', 'shard='), { timeout: 20_000 }).toBe(0);
    // And the next request runs on the restarted stage as before.
    expect(await complete(prompts[1])).toBe(reference.get(prompts[1]));
  });
});

// Two pipelines on one machine (issue 44, finding 6), each as a user runs it: `npm start -- --stage-processes`,
// its stage in a `wrangler dev` process of its own, the dev registry connecting them (a registry of this test's
// own, so that other runs on the machine see none of it). Judged by what pipeline A sees while B starts, serves
// and stops: its stage stays its own (B's registers beside it, under another name), its answers are the
// one-process engine's, after B has stopped too (B's stop leaves A's registry entry in place). Before the stage
// scripts were named for their run, B's start took A's stage over and A stopped answering at all.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collect, loadEngine } from '../helpers/engines.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const VARS = { MODEL: 'tiny', MODEL_DTYPE: 'q4', PIPELINE_STAGES: '1' };
const prompts = ['Once upon a time', 'The sea was calm', 'A dog and a cat'];
const registry = mkdtempSync(join(tmpdir(), 'edge-infer-registry-'));
const reference = new Map<string, string>();
let a: DevServer | undefined;
let b: DevServer | undefined;

const startPipeline = () =>
  startDevServer(VARS, undefined, {
    via: 'npm-start',
    args: ['--stage-processes'],
    env: { WRANGLER_REGISTRY_PATH: registry },
    readyWithinMs: 120_000,
  });

beforeAll(async () => {
  const engine = await loadEngine('kernels', 'tiny', { dtype: 'q4' });
  for (const prompt of prompts)
    reference.set(
      prompt,
      (await collect(engine, { prompt, max_tokens: 24, temperature: 0, ignore_eos: true })).done.text,
    );
  await engine.runner.release();
  a = await startPipeline();
});

afterAll(async () => {
  await b?.stop();
  await a?.stop();
  rmSync(registry, { recursive: true, force: true });
});

async function complete(server: DevServer, prompt: string): Promise<string> {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 24, temperature: 0, ignore_eos: true }),
  });
  const body = (await res.json()) as { choices: { text: string }[] };
  expect(res.status, JSON.stringify(body)).toBe(200);
  return body.choices[0].text;
}

describe('two npm start pipelines on one machine', () => {
  it("neither resets the other's stages, and stopping one leaves the other's registry entries", async () => {
    expect(await complete(a!, prompts[0])).toBe(reference.get(prompts[0]));
    // The stages' entries: the head's (`edge-infer`, which nothing here binds to) is one name for every head of
    // that script, as for any two `wrangler dev` of one script.
    const entries = readdirSync(registry).filter((name) => name.includes('-stage-'));
    expect(entries).toHaveLength(1);
    b = await startPipeline();
    // Each pipeline's stage is a script of its own: B's registration adds entries, it replaces none of A's.
    const both = readdirSync(registry).filter((name) => name.includes('-stage-'));
    expect(both).toHaveLength(2);
    expect(both).toEqual(expect.arrayContaining(entries));
    expect(await complete(b, prompts[1])).toBe(reference.get(prompts[1]));
    expect(await complete(a!, prompts[1])).toBe(reference.get(prompts[1]));
    await b.stop();
    b = undefined;
    expect(readdirSync(registry)).toEqual(expect.arrayContaining(entries));
    expect(await complete(a!, prompts[2])).toBe(reference.get(prompts[2]));
  });
});

// A pipeline stage that dies and stays away (issue 44, finding 7): the head (with stage 1) in one `wrangler dev`,
// stage 2 in a process of its own, killed mid-stream and not brought back for a while. Every stream then in
// flight ends with an SSE error event `stage_unavailable` (a 503's error, not `generation_failed`), a request
// while it is away gets 503 + Retry-After at once, in OpenAI's schema, and once the stage is back the head
// serves again with the one-process engine's text.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createParser } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writePipelineConfigs } from '../../scripts/lib/stage-configs.js';
import { collect, loadEngine } from '../helpers/engines.js';
import { startConfiguredServer, type DevServer } from './helpers/wrangler.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VARS = { MODEL: 'tiny', MODEL_DTYPE: 'q4' };
const TAG = `down${process.pid}`;
const PROMPT = 'Once upon a time';

let head: DevServer | undefined;
let stage2: DevServer | undefined;
let files: string[] = [];
let reference = '';
const startStage2 = () => startConfiguredServer({}, undefined, { configs: [files[2]] });

beforeAll(async () => {
  files = writePipelineConfigs(ROOT, readFileSync(join(ROOT, 'wrangler.toml'), 'utf8'), 2, VARS, TAG);
  stage2 = await startStage2();
  // A stage is waited for 5 s (not the default 30) before its requests fail: the test's wait.
  head = await startConfiguredServer({ ...VARS, PIPELINE_STAGES: '2', PIPELINE_STAGE_WAIT_MS: '5000' }, undefined, {
    configs: [files[0], files[1]],
  });
  const engine = await loadEngine('kernels', 'tiny', { dtype: 'q4' });
  reference = (await collect(engine, { prompt: PROMPT, max_tokens: 24, temperature: 0, ignore_eos: true })).done.text;
  await engine.runner.release();
});

afterAll(async () => {
  await head?.stop();
  await stage2?.stop();
  for (const file of files) rmSync(join(ROOT, file), { force: true });
});

const post = (body: Record<string, unknown>) =>
  fetch(`${head!.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: PROMPT, temperature: 0, ignore_eos: true, ...body }),
  });

/** A stream's chunks until it ends, and its error event, if any; `onChunk` sees the running count. */
async function readStream(res: Response, onChunk?: (chunks: number) => void) {
  let chunks = 0;
  let error: { code?: string; type?: string; message?: string } | undefined;
  let done = false;
  const parser = createParser({
    onEvent: (e) => {
      if (e.data === '[DONE]') {
        done = true;
        return;
      }
      const chunk = JSON.parse(e.data) as { error?: typeof error };
      if (chunk.error) error = chunk.error;
      else onChunk?.(++chunks);
    },
  });
  const decoder = new TextDecoder();
  const reader = res.body!.getReader();
  for (let r = await reader.read(); !r.done; r = await reader.read())
    parser.feed(decoder.decode(r.value, { stream: true }));
  return { chunks, error, done };
}

describe('a pipeline stage that dies and stays away', () => {
  it('ends the streams with stage_unavailable, answers 503 + Retry-After meanwhile, and serves once it is back', async () => {
    // Two streams (two clients) in flight when stage 2 dies.
    const streams = await Promise.all([
      post({ max_tokens: 1500, stream: true }),
      post({ max_tokens: 1500, stream: true }),
    ]);
    for (const res of streams) expect(res.status).toBe(200);
    let killed: Promise<void> | undefined;
    // Killed once both have 4 chunks: the second may start a step after the first.
    const counts = streams.map(() => 0);
    const ends = await Promise.all(
      streams.map((res, i) =>
        readStream(res, (chunks) => {
          counts[i] = chunks;
          if (Math.min(...counts) >= 4) killed ??= stage2!.kill();
        }),
      ),
    );
    await killed;
    for (const end of ends) {
      expect(end.done).toBe(false);
      expect(end.chunks).toBeGreaterThanOrEqual(4);
      expect(end.error).toMatchObject({ type: 'server_error', code: 'stage_unavailable' });
      expect(end.error?.message).toMatch(/pipeline stage of layers .* did not answer/);
    }
    // While it is away: a 503 in OpenAI's schema, with when to try again, and no wait for the stage again.
    const down = await post({ max_tokens: 8 });
    const body = (await down.json()) as { error: Record<string, unknown> };
    expect(down.status, JSON.stringify(body)).toBe(503);
    expect(down.headers.get('retry-after')).toBe('5');
    expect(body.error).toMatchObject({ type: 'server_error', code: 'stage_unavailable', param: null });
    // Back: the head reconnects and answers with the one-process engine's text.
    stage2 = await startStage2();
    await expect
      .poll(async () => (await post({ max_tokens: 24 })).status, { timeout: 60_000, interval: 1000 })
      .toBe(200);
    const res = await post({ max_tokens: 24 });
    const again = (await res.json()) as { choices: { text: string }[] };
    expect(again.choices[0].text).toBe(reference);
  });
});

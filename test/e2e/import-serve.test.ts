// A real model path end to end: a llama2.c checkpoint (written here in run.c's format) is imported with
// model:import, put into the local R2 bucket with model:upload, and served by `wrangler dev` with MODEL=<name>:
// greedy output over HTTP equals the reference forward pass run with run.c's conventions. The same model
// under a memory budget it does not fit is refused with a 503 that says why.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseImportArgs, runImport } from '../../scripts/model-import.js';
import { uploadModel } from '../../scripts/model-upload.js';
import { PRESETS } from '../../scripts/model/presets.js';
import { IncrementalDetokenizer } from '../../src/tokenizer/incremental-detokenizer.js';
import { TextTokenizer } from '../../src/tokenizer/tokenizer.js';
import { runcEncode, trainVocab, writeCheckpoint, writeTokenizerBin } from '../helpers/llama2c.js';
import { loadLlama2cReference } from '../reference/llama2c-weights.js';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const ROOT = join(import.meta.dirname, '..', '..');
const NAME = 'stories-e2e';
const PROMPT = 'Once upon a time, there was';
let dir: string;
let persist: string;
let folder: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'import-serve-'));
  persist = mkdtempSync(join(tmpdir(), 'import-serve-state-'));
  const vocab = trainVocab(readFileSync(join(ROOT, 'scripts/tokenizer/corpus.txt'), 'utf8'), 300);
  writeTokenizerBin(join(dir, 'tokenizer.bin'), vocab);
  writeCheckpoint(join(dir, 'model.bin'), { ...PRESETS.tiny, vocabSize: vocab.pieces.length }, 256, 5);
  folder = join(dir, NAME);
  runImport(parseImportArgs(['llama2c', join(dir, 'model.bin'), join(dir, 'tokenizer.bin'), '--out', folder]));
  await uploadModel({ folder, name: NAME, remote: false, persistTo: persist }, () => {});
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(persist, { recursive: true, force: true });
});

describe('MODEL=<name> serves an imported model from the local R2 bucket', () => {
  let server: DevServer;
  beforeAll(async () => {
    server = await startDevServer({ MODEL: NAME, KV_CACHE_MB: '2' }, persist);
  });
  afterAll(() => server?.stop());

  it("greedy chat output over HTTP equals run.c's math on the checkpoint", async () => {
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual([NAME]);
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({
        messages: [{ role: 'user', content: PROMPT }],
        max_tokens: 20,
        temperature: 0,
        ignore_eos: true,
      }),
    });
    const body = (await res.json()) as {
      choices: { message: { content: string } }[];
      usage: { prompt_tokens: number };
    };
    expect(res.status, JSON.stringify(body)).toBe(200);

    const vocab = trainVocab(readFileSync(join(ROOT, 'scripts/tokenizer/corpus.txt'), 'utf8'), 300);
    const prompt = runcEncode(vocab, PROMPT, true);
    const ids = (await loadLlama2cReference(join(dir, 'model.bin'))).greedy(prompt, 20);
    const tok = TextTokenizer.fromJson(
      JSON.parse(readFileSync(join(folder, 'tokenizer.json'), 'utf8')),
      JSON.parse(readFileSync(join(folder, 'tokenizer_config.json'), 'utf8')),
    );
    const detok = new IncrementalDetokenizer(tok);
    const expected = ids.map((id) => detok.push(id)).join('') + detok.flush();
    expect(body.usage.prompt_tokens).toBe(prompt.length);
    expect(body.choices[0].message.content).toBe(expected);
  });
});

describe('a model past MEMORY_BUDGET_MB', () => {
  let server: DevServer;
  beforeAll(async () => {
    server = await startDevServer({ MODEL: NAME, KV_CACHE_MB: '2', MEMORY_BUDGET_MB: '1' }, persist);
  });
  afterAll(() => server?.stop());

  it('is refused with a 503 naming the model, its size and the budget; the server goes on answering', async () => {
    const res = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Hi', max_tokens: 2 }),
    });
    const body = (await res.json()) as { error: { message: string; code: string } };
    expect(res.status).toBe(503);
    expect(body.error.code).toBe('model_too_large');
    expect(body.error.message).toMatch(
      // The isolate's terms: the code and tokenizer once, each of the SHARD_COUNT shards' own part, and room
      // for every shard's KV pool at its floor (docs/deploy.md, "Isolates: what a shard costs").
      /^model "stories-e2e" cannot be served: the model does not fit the memory budget: weights (\(so far\) )?\d+\.\d MiB \+ scratch \d+\.\d MiB \+ isolate besides the runners \(code, JS heap, tokenizer\) \d+\.\d MiB \+ 2 x its JS state, grammars and streams \d+\.\d MiB \+ KV cache \d+\.\d MiB = .* > budget 1\.0 MiB/,
    );
    expect((await fetch(`${server.url}/v1/models`)).status).toBe(200);
  });
});

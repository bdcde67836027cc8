// A base model (its tokenizer_config.json has no chat_template) loads and serves prompts; only a chat request
// is refused, naming the missing template, unless CHAT_TEMPLATE (the engine's chatTemplate) gives one.
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { directorySource } from '../src/sources/directory-source.js';
import { spawnSync } from 'node:child_process';
import { importGguf } from '../scripts/import/gguf.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { presetGgufInput, writeLlamaGguf } from '../scripts/model/gguf-writer.js';
import { collect, modelDir } from './helpers/engines.js';

let base: string;
let template: string;

beforeAll(() => {
  base = join(mkdtempSync(join(tmpdir(), 'edge-infer-base-')), 'tiny-base');
  cpSync(modelDir('tiny'), base, { recursive: true });
  const config = JSON.parse(readFileSync(join(base, 'tokenizer_config.json'), 'utf8'));
  template = config.chat_template;
  delete config.chat_template;
  writeFileSync(join(base, 'tokenizer_config.json'), JSON.stringify(config));
});

const load = async (chatTemplate?: string) =>
  Engine.load(await nodeRuntime('kernels'), directorySource(base), { dtype: 'q4', chatTemplate });

describe('a base model without a chat template', () => {
  it('loads and serves a prompt with the tokens of the model that has one', async () => {
    const engine = await load();
    const withTemplate = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('tiny')), {
      dtype: 'q4',
    });
    const r = { prompt: 'Once upon a time', max_tokens: 12, temperature: 0 };
    expect((await collect(engine, r)).done.tokenIds).toEqual((await collect(withTemplate, r)).done.tokenIds);
  });

  it('refuses a chat request by name, before any compute', async () => {
    const engine = await load();
    let err: unknown;
    try {
      engine.resolve({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidRequestError);
    expect(err).toMatchObject({ param: 'messages', code: 'chat_template_missing' });
    expect((err as Error).message).toMatch(/no chat template.*CHAT_TEMPLATE/);
    expect(engine.stats().steps).toBe(0);
  });

  it('chats with a template given to it', async () => {
    const engine = await load(template);
    const withTemplate = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('tiny')), {
      dtype: 'q4',
    });
    const r = { messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 8, temperature: 0 };
    expect((await collect(engine, r)).done.tokenIds).toEqual((await collect(withTemplate, r)).done.tokenIds);
  });
});

describe("a base model's GGUF file (no tokenizer.chat_template)", () => {
  let folder: string;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'edge-infer-base-gguf-'));
    const file = join(dir, 'base.gguf');
    writeLlamaGguf(file, { ...presetGgufInput('tiny-256', DEFAULT_SEED), chatTemplate: undefined }, 'Q8_0');
    folder = join(dir, 'base');
    await importGguf(file, folder);
  });

  it('imports without a template, serves prompts on the kernels and refuses chat by name', async () => {
    expect(JSON.parse(readFileSync(join(folder, 'tokenizer_config.json'), 'utf8')).chat_template).toBeUndefined();
    const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(folder));
    const done = (await collect(engine, { prompt: 'Once upon a time', max_tokens: 8, temperature: 0 })).done;
    expect(done.tokenIds).toHaveLength(8);
    expect(() => engine.resolve({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 })).toThrow(
      expect.objectContaining({ code: 'chat_template_missing' }),
    );
    await engine.runner.release();
  });

  it('npm run generate takes --prompt and --prompt-ids without one', () => {
    for (const input of [
      ['--prompt', 'Once upon a time'],
      ['--prompt-ids', '5,6,7'],
    ]) {
      const out = spawnSync(
        'npx',
        [
          'tsx',
          'scripts/generate.ts',
          '--model',
          folder,
          ...input,
          '--max-tokens',
          '4',
          '--temperature',
          '0',
          '--json',
        ],
        { encoding: 'utf8', timeout: 60_000 },
      );
      expect(out.status, out.stderr).toBe(0);
      expect(JSON.parse(out.stdout).token_ids).toHaveLength(4);
    }
  });
});

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

// The one rule for a folder's default weights (src/engine/model/default-weights.ts), as the command line,
// Engine.load and the service's sources (a folder, HTTP) apply it: the only weights, else the GGUF, else fp32,
// else a refusal listing what the folder holds and the setting that picks one.
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { folderWeights } from '../scripts/lib/model-weights.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { startStaticServer } from '../scripts/lib/static-server.js';
import { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { chooseWeights } from '../src/engine/model/default-weights.js';
import { directorySource } from '../src/sources/directory-source.js';
import { fetchSource } from '../src/sources/fetch-source.js';
import { collect, modelDir } from './helpers/engines.js';

const META = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'];
let root: string;

/** A folder with tiny's config and tokenizer and the given weights files (empty stand-ins unless copied from tiny). */
function folder(name: string, files: string[], config: Record<string, unknown> = {}): string {
  const dir = join(root, name);
  mkdirSync(join(dir, 'onnx'), { recursive: true });
  for (const f of META) copyFileSync(join(modelDir('tiny'), f), join(dir, f));
  if (Object.keys(config).length > 0) writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  for (const f of files) writeFileSync(join(dir, f), '');
  return dir;
}

const choose = (dir: string, asked?: string, config: Record<string, unknown> = {}) =>
  chooseWeights(directorySource(dir, `models/${dir.split('/').pop()}/`), config, asked, 'MODEL_DTYPE');

async function refusal(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(InvalidRequestError);
  return (err as Error).message;
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'default-weights-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('the default weights of a folder', () => {
  it('is its only weights, else its GGUF, else fp32', async () => {
    expect(await choose(folder('only-q4', ['onnx/model_q4.onnx']))).toMatchObject({
      dtype: 'q4',
      file: 'onnx/model_q4.onnx',
      reason: 'only',
    });
    expect(await choose(folder('q4-fp32', ['onnx/model_q4.onnx', 'onnx/model.onnx']))).toMatchObject({
      dtype: 'fp32',
      reason: 'fp32',
    });
    const gguf = { gguf_file: 'smol.Q4_0.gguf' };
    expect(await choose(folder('gguf-q4', ['smol.Q4_0.gguf', 'onnx/model_q4.onnx']), undefined, gguf)).toMatchObject({
      dtype: 'gguf',
      file: 'smol.Q4_0.gguf',
      reason: 'gguf',
    });
    // A model.gguf that config.json does not name still counts as the folder's GGUF.
    expect(await choose(folder('model-gguf', ['model.gguf', 'onnx/model_int8.onnx']))).toMatchObject({ dtype: 'gguf' });
  });

  it('refuses several weights without fp32 or GGUF, listing them and naming the setting', async () => {
    const message = await refusal(choose(folder('q4-int8', ['onnx/model_q4.onnx', 'onnx/model_int8.onnx'])));
    expect(message).toContain('models/q4-int8/');
    expect(message).toContain('int8 (onnx/model_int8.onnx), q4 (onnx/model_q4.onnx)');
    expect(message).toContain('MODEL_DTYPE=int8');
    expect(await refusal(choose(folder('no-weights', [])))).toMatch(
      /no weights in models\/no-weights\/: looked for onnx\/model\.onnx, .*model\.gguf/,
    );
  });

  it('an asked-for variant the folder lacks is refused with the variants it has', async () => {
    const dir = folder('asked', ['onnx/model_q4.onnx']);
    expect(await choose(dir, 'q4')).toMatchObject({ dtype: 'q4', reason: 'asked' });
    expect(await refusal(choose(dir, 'fp32'))).toBe(
      'MODEL_DTYPE=fp32 asks for onnx/model.onnx, which is missing in models/asked/; the folder holds q4 (onnx/model_q4.onnx): set MODEL_DTYPE to q4',
    );
  });

  it('the command line, Engine.load and an HTTP source pick the same file: a q4-only folder runs its q4', async () => {
    const dir = folder('served-q4', []);
    copyFileSync(join(modelDir('tiny'), 'onnx/model_q4.onnx'), join(dir, 'onnx/model_q4.onnx'));
    expect((await folderWeights(dir)).dtype).toBe('q4');
    expect(await refusal(folderWeights(dir, 'fp16'))).toContain('--dtype=fp16 asks for onnx/model_fp16.onnx');

    const request = { prompt: 'Hello', max_tokens: 6, temperature: 0, ignore_eos: true };
    const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(dir));
    const fromFolder = (await collect(engine, request)).done.tokenIds;
    await engine.runner.release();
    const reference = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('tiny')), {
      dtype: 'q4',
    });
    expect(fromFolder).toEqual((await collect(reference, request)).done.tokenIds);
    await reference.runner.release();

    // Over real HTTP, as MODEL_URL reads a folder: found with HEAD requests, the weights fetched once.
    const server = await startStaticServer(dir);
    try {
      const overHttp = await Engine.load(await nodeRuntime('kernels'), fetchSource({ fetch }, server.url));
      expect((await collect(overHttp, request)).done.tokenIds).toEqual(fromFolder);
      await overHttp.runner.release();
      const weights = server.requests.filter((r) => r.path.endsWith('.onnx'));
      expect(weights.filter((r) => r.method === 'GET').map((r) => r.path)).toEqual(['/onnx/model_q4.onnx']);
      expect(weights.every((r) => r.method === 'HEAD' || r.path === '/onnx/model_q4.onnx')).toBe(true);
    } finally {
      await server.close();
    }
  });
});

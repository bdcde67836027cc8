// How the server finds real models: MODEL_URL (any HTTP server holding the folder), the 25 MiB asset cap
// (big model folders are left out of ./models' assets), and MODEL=<name> npm start.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ASSET_LIMIT_BYTES, ignoreLargeModelFolders } from '../scripts/import/assets-ignore.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { filesToUpload, parseUploadArgs } from '../scripts/model-upload.js';
import { Engine } from '../src/engine/engine.js';
import { modelSourceFor } from '../src/sources/model-source.js';
import { collect, loadEngine, modelDir } from './helpers/engines.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'serving-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('MODEL_URL: the model folder from any HTTP server', () => {
  let server: Server;
  const paths: string[] = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      paths.push(req.url!);
      try {
        res.end(
          readFileSync(
            join(modelDir('tiny'), decodeURIComponent(new URL(req.url!, 'http://x').pathname.replace(/^\/tiny\//, ''))),
          ),
        );
      } catch {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  });
  afterAll(() => new Promise((r) => server.close(r)));

  it('serves the same tokens as the folder on disk, and wins over the assets', async () => {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/tiny/`;
    const assets = { fetch: async () => new Response('assets must not be read', { status: 500 }) };
    const { source, from } = await modelSourceFor('tiny', { url, assets });
    expect(from).toBe(url);
    const overHttp = await Engine.load(await nodeRuntime('cpu'), source, { kvCacheBytes: 1 << 20 });
    const onDisk = await loadEngine('cpu', 'tiny', { kvCacheBytes: 1 << 20 });
    const request = { prompt: 'Hello', max_tokens: 8, temperature: 0 };
    expect((await collect(overHttp, request)).done.tokenIds).toEqual((await collect(onDisk, request)).done.tokenIds);
    expect(paths).toContain('/tiny/onnx/model.onnx');
    await overHttp.runner.release();
    await onDisk.runner.release();
  });
});

describe('model folders over the 25 MiB asset cap', () => {
  it('are listed once in models/.assetsignore (wrangler refuses to start on a bigger asset)', () => {
    const models = join(dir, 'models');
    mkdirSync(join(models, 'big', 'onnx'), { recursive: true });
    mkdirSync(join(models, 'small'), { recursive: true });
    writeFileSync(join(models, 'big', 'onnx', 'model_q4.onnx'), '');
    truncateSync(join(models, 'big', 'onnx', 'model_q4.onnx'), ASSET_LIMIT_BYTES + 1); // sparse: no disk used
    writeFileSync(join(models, 'small', 'config.json'), '{}');
    expect(ignoreLargeModelFolders(models)).toEqual(['big']);
    expect(ignoreLargeModelFolders(models)).toEqual([]);
    expect(
      readFileSync(join(models, '.assetsignore'), 'utf8')
        .split('\n')
        .filter((l) => l && !l.startsWith('#')),
    ).toEqual(['big/']);
  });
});

describe('model:upload and npm start arguments', () => {
  it('uploads the config, tokenizer and graph files, named after the folder', () => {
    expect(parseUploadArgs([modelDir('tiny')])).toMatchObject({ name: 'tiny', remote: false });
    expect(filesToUpload(modelDir('tiny'), 'q4')).toEqual([
      'config.json',
      'generation_config.json',
      'tokenizer.json',
      'tokenizer_config.json',
      'onnx/model_q4.onnx',
    ]);
    expect(filesToUpload(modelDir('tiny'))).toContain('onnx/model_fp16.onnx');
    expect(() => filesToUpload(modelDir('tiny'), 'bnb4')).toThrow(/has no onnx\/model_bnb4\.onnx/);
    expect(() => parseUploadArgs(['x', '--name', 'a/b'])).toThrow(/--name "a\/b"/);
  });

  it('uploads a GGUF folder with the file its config.json names, with or without --dtype gguf', () => {
    const folder = mkdtempSync(join(tmpdir(), 'edge-infer-upload-gguf-'));
    try {
      writeFileSync(join(folder, 'config.json'), JSON.stringify({ model_type: 'llama', gguf_file: 'model.gguf' }));
      writeFileSync(join(folder, 'tokenizer.json'), '{}');
      expect(() => filesToUpload(folder)).toThrow(/has no onnx\/model\*\.onnx and no model\.gguf/);
      writeFileSync(join(folder, 'model.gguf'), 'GGUF');
      expect(filesToUpload(folder)).toEqual(['config.json', 'tokenizer.json', 'model.gguf']);
      expect(filesToUpload(folder, 'gguf')).toEqual(['config.json', 'tokenizer.json', 'model.gguf']);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it('MODEL=<name> npm start passes the model vars (only those) to wrangler dev', async () => {
    const { startArgs } = await import('../scripts/start-args.js');
    expect(startArgs({ MODEL: 'smollm2', MODEL_DTYPE: 'q4', HF_TOKEN: 'secret' }, ['--var', 'API_KEYS:k'])).toEqual([
      'dev',
      '--ip',
      '127.0.0.1',
      '--port',
      '8787',
      '--var',
      'MODEL:smollm2',
      '--var',
      'MODEL_DTYPE:q4',
      '--var',
      'API_KEYS:k',
    ]);
    expect(startArgs({}, ['--port', '9000'])).toEqual(['dev', '--ip', '127.0.0.1', '--port', '9000']);
    // The runner and the older model spelling too: a fallback asked away must reach the server.
    expect(startArgs({ BACKEND: 'kernels', MODEL_NAME: 'm', SHARD_COUNT: '1' }, [])).toEqual(
      expect.arrayContaining(['BACKEND:kernels', 'MODEL_NAME:m', 'SHARD_COUNT:1']),
    );
  });

  it('npm start keeps as many passes in flight as stages can compute at once on this machine', async () => {
    const { inFlightArgs } = await import('../scripts/start-args.js');
    const stages = { PIPELINE_STAGES: '3' };
    expect(inFlightArgs(stages, true, 2)).toEqual(['--var', 'PIPELINE_IN_FLIGHT:2']);
    expect(inFlightArgs(stages, true, 16)).toEqual(['--var', 'PIPELINE_IN_FLIGHT:3']);
    expect(inFlightArgs(stages, false, 16)).toEqual(['--var', 'PIPELINE_IN_FLIGHT:1']);
    expect(inFlightArgs({ ...stages, PIPELINE_IN_FLIGHT: '5' }, true, 2)).toEqual([]);
    expect(inFlightArgs({}, true, 2)).toEqual([]);
  });

  it("npm start names the configured model first (wrangler's table hides the values), never MODEL_URL", async () => {
    const { startArgs, startLine } = await import('../scripts/start-args.js');
    const toml = readFileSync(new URL('../wrangler.toml', import.meta.url), 'utf8');
    expect(startLine(toml, startArgs({}, []))).toMatch(/^edge-infer: serving wordnet-chat .*127\.0\.0\.1:8787/);
    const line = startLine(
      toml,
      startArgs({ MODEL: 'smollm2', MODEL_DTYPE: 'q4', MODEL_URL: 'https://x/?token=secret' }, ['--port', '9000']),
    );
    expect(line).toMatch(/serving smollm2 \(MODEL_DTYPE=q4, MODEL_URL=\(set\)/);
    expect(line).toContain(':9000');
    expect(line).not.toContain('secret');
  });
});

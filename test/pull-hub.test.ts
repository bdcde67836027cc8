// model:pull against a local stand-in for the Hugging Face hub (test/helpers/hub-server.ts): the hub's
// URL layout, CDN redirects for LFS files, Range resume after a dropped connection or an interrupted run,
// checksums, gated repos with HF_TOKEN, HF_ENDPOINT, clear errors; the pulled folder is served.
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HubError } from '../scripts/import/hub-client.js';
import { renderBar } from '../scripts/import/progress.js';
import { pullModel } from '../scripts/import/pull.js';
import { parsePullArgs } from '../scripts/model-pull.js';
import { collect, loadEngine, modelDir } from './helpers/engines.js';
import { LocalHub } from './helpers/hub-server.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import { directorySource } from '../src/sources/directory-source.js';

const ROOT = join(import.meta.dirname, '..');
const REPO = 'onnx-community/Tiny-Instruct-ONNX';
const GATED = 'someorg/gated-tiny';
const ODD = 'someorg/t5-small-onnx';
let dir: string;
let hub: LocalHub;

function repoDir(name: string, configPatch: Record<string, unknown> = {}): string {
  const d = join(dir, 'hub', name);
  mkdirSync(join(d, 'onnx'), { recursive: true });
  for (const f of ['generation_config.json', 'tokenizer.json', 'tokenizer_config.json'])
    copyFileSync(join(modelDir('tiny'), f), join(d, f));
  const config = JSON.parse(readFileSync(join(modelDir('tiny'), 'config.json'), 'utf8'));
  writeFileSync(join(d, 'config.json'), JSON.stringify({ ...config, ...configPatch }));
  for (const f of ['model.onnx', 'model_q4.onnx']) copyFileSync(join(modelDir('tiny'), 'onnx', f), join(d, 'onnx', f));
  writeFileSync(join(d, 'README.md'), '# tiny\n');
  return d;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pull-'));
  hub = await new LocalHub({
    [REPO]: { dir: repoDir(REPO) },
    [GATED]: { dir: repoDir(GATED), gatedToken: 'hf_secret' },
    [ODD]: { dir: repoDir(ODD, { model_type: 't5' }) },
  }).start();
});
afterAll(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

const out = (name: string) => join(dir, 'out', name);
const same = (a: string, b: string) => expect(readFileSync(a).equals(readFileSync(b)), `${a} == ${b}`).toBe(true);

describe('model:pull', () => {
  it("pulls an ONNX export at the revision's commit (model_q4 by default), and the engine serves it", async () => {
    const dest = out('tiny');
    const r = await pullModel({ repo: REPO, outDir: dest, endpoint: hub.endpoint });
    expect(r.sha).toBe(LocalHub.sha(REPO));
    expect(r.dtypes).toEqual(['q4']);
    expect(r.files.map((f) => f.file).sort()).toEqual([
      'config.json',
      'generation_config.json',
      'onnx/model_q4.onnx',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
    expect(r.kvBytesPerToken).toBe(512);
    for (const f of r.files) same(join(dest, f.file), join(dir, 'hub', REPO, f.file));
    const resolves = hub.log.filter((e) => e.path.includes('/resolve/'));
    expect(
      resolves.every((e) => e.path.includes(`/resolve/${r.sha}/`)),
      'files are fetched at the commit sha',
    ).toBe(true);
    expect(
      hub.log.some((e) => e.path.startsWith('/cdn/')),
      'the LFS redirect to the CDN is followed',
    ).toBe(true);

    const pulled = await Engine.load(await nodeRuntime('cpu'), directorySource(dest), {
      dtype: 'q4',
      kvCacheBytes: 1 << 20,
    });
    const original = await loadEngine('cpu', 'tiny', { dtype: 'q4', kvCacheBytes: 1 << 20 });
    const request = { prompt: 'Hello', max_tokens: 12, temperature: 0, ignore_eos: true };
    expect((await collect(pulled, request)).done.tokenIds).toEqual((await collect(original, request)).done.tokenIds);
    await pulled.runner.release();
    await original.runner.release();

    // Pulled again: every file is verified in place and nothing is downloaded.
    const before = hub.log.length;
    const again = await pullModel({ repo: REPO, outDir: dest, endpoint: hub.endpoint });
    expect(again.files.every((f) => f.status === 'present')).toBe(true);
    expect(hub.log.slice(before).filter((e) => e.path.includes('/resolve/'))).toEqual([]);
  });

  it('resumes with a Range request after a dropped connection, and from a .part an interrupted run left', async () => {
    const dest = out('resume');
    hub.cutAfter.set('onnx/model.onnx', 40_000);
    const before = hub.log.length;
    await pullModel({ repo: REPO, outDir: dest, endpoint: hub.endpoint, files: ['onnx/model.onnx'] });
    same(join(dest, 'onnx/model.onnx'), join(dir, 'hub', REPO, 'onnx/model.onnx'));
    // Ranges as the CDN saw them (the resolve URL sees the same header before it redirects).
    const ranges = hub.log
      .slice(before)
      .filter((e) => e.range && e.path.startsWith('/cdn/'))
      .map((e) => Number(/bytes=(\d+)-/.exec(e.range!)![1]));
    expect(ranges.length).toBe(1);
    expect(ranges[0]).toBeGreaterThan(0);
    expect(ranges[0]).toBeLessThanOrEqual(40_000);

    const dest2 = out('resume-part');
    mkdirSync(join(dest2, 'onnx'), { recursive: true });
    writeFileSync(
      join(dest2, 'onnx/model.onnx.part'),
      readFileSync(join(dir, 'hub', REPO, 'onnx/model.onnx')).subarray(0, 1000),
    );
    const mark = hub.log.length;
    await pullModel({ repo: REPO, outDir: dest2, endpoint: hub.endpoint, files: ['onnx/model.onnx'] });
    expect(
      hub.log
        .slice(mark)
        .filter((e) => e.range && e.path.startsWith('/cdn/'))
        .map((e) => e.range),
    ).toEqual(['bytes=1000-']);
    same(join(dest2, 'onnx/model.onnx'), join(dir, 'hub', REPO, 'onnx/model.onnx'));
    expect(existsSync(join(dest2, 'onnx/model.onnx.part'))).toBe(false);
  });

  it('refuses a file whose checksum is wrong and leaves nothing behind', async () => {
    const dest = out('corrupt');
    hub.corrupt.add('onnx/model_q4.onnx');
    try {
      await expect(pullModel({ repo: REPO, outDir: dest, endpoint: hub.endpoint })).rejects.toThrow(
        /onnx\/model_q4\.onnx: checksum mismatch \(sha256 [0-9a-f]{64} != [0-9a-f]{64}\)/,
      );
    } finally {
      hub.corrupt.delete('onnx/model_q4.onnx');
    }
    expect(existsSync(join(dest, 'onnx/model_q4.onnx'))).toBe(false);
    expect(existsSync(join(dest, 'onnx/model_q4.onnx.part'))).toBe(false);
    hub.corrupt.add('tokenizer.json'); // not LFS: checked by its git blob id
    try {
      await expect(pullModel({ repo: REPO, outDir: out('corrupt2'), endpoint: hub.endpoint })).rejects.toThrow(
        /tokenizer\.json: checksum mismatch \(git-sha1/,
      );
    } finally {
      hub.corrupt.delete('tokenizer.json');
    }
  });

  it('gated repos need HF_TOKEN, sent as a Bearer token', async () => {
    await expect(
      pullModel({ repo: GATED, outDir: out('gated'), endpoint: hub.endpoint, token: undefined }),
    ).rejects.toThrow(/HTTP 401: the repo is gated or private; set HF_TOKEN/);
    await expect(
      pullModel({ repo: GATED, outDir: out('gated'), endpoint: hub.endpoint, token: 'hf_wrong' }),
    ).rejects.toThrow(/HF_TOKEN was sent but does not grant access/);
    const mark = hub.log.length;
    await pullModel({ repo: GATED, outDir: out('gated'), endpoint: hub.endpoint, token: 'hf_secret' });
    const calls = hub.log.slice(mark).filter((e) => !e.path.startsWith('/cdn/'));
    expect(calls.length).toBeGreaterThan(3);
    expect(calls.every((e) => e.authorization === 'Bearer hf_secret')).toBe(true);
  });

  it('clear errors: unknown repo or revision, a missing graph, an architecture the engine cannot serve (before the big download)', async () => {
    const o = { outDir: out('errors'), endpoint: hub.endpoint };
    await expect(pullModel({ ...o, repo: 'nobody/nothing' })).rejects.toThrow(
      /nobody\/nothing@main: HTTP 404: no such repo, revision or file/,
    );
    await expect(pullModel({ ...o, repo: REPO, revision: 'v9' })).rejects.toThrow(/@v9: HTTP 404/);
    await expect(pullModel({ ...o, repo: REPO, files: ['onnx/model_q4f16.onnx'] })).rejects.toThrow(
      /has no onnx\/model_q4f16\.onnx \(it has onnx\/model\.onnx, onnx\/model_q4\.onnx\)/,
    );
    await expect(pullModel({ ...o, repo: REPO, files: ['onnx/decoder_model_merged.onnx'] })).rejects.toThrow(HubError);
    await expect(pullModel({ ...o, repo: 'not a repo' })).rejects.toThrow(/repo must look like <org>\/<name>/);
    const mark = hub.log.length;
    await expect(pullModel({ ...o, repo: ODD, outDir: out('t5') })).rejects.toThrow(/model_type "t5" is not supported/);
    expect(hub.log.slice(mark).some((e) => e.path.endsWith('.onnx'))).toBe(false);
  });

  it('runs as a command with HF_ENDPOINT, printing progress and the memory the model needs', async () => {
    const dest = out('cli');
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'scripts/model-pull.ts'), REPO, '--file', 'onnx/model.onnx', '--out', dest],
      {
        cwd: ROOT,
        env: { ...process.env, HF_ENDPOINT: hub.endpoint, HF_TOKEN: '' },
      },
    );
    expect(stdout).toMatch(
      /pulled onnx-community\/Tiny-Instruct-ONNX@[0-9a-f]{12} into .* \(5 downloaded, 0 already there\)/,
    );
    expect(stdout).toMatch(/memory: weights 0\.\d MiB \+ KV cache 0\.5 KiB per token/);
    expect(stderr).toMatch(/onnx\/model\.onnx \[#{30}\] 100%/);
    same(join(dest, 'onnx/model.onnx'), join(dir, 'hub', REPO, 'onnx/model.onnx'));
    expect(parsePullArgs(['a/B-C'])).toMatchObject({ repo: 'a/B-C', outDir: join('models', 'b-c'), files: [] });
    expect(() => parsePullArgs(['a/b', '--bogus', '1'])).toThrow(/unknown option --bogus/);
    expect(renderBar({ file: 'f', done: 512 << 10, total: 1 << 20, finished: false }, 2 << 20, 10)).toBe(
      'f [#####.....]  50% 0.5/1.0 MiB 2.0 MiB/s',
    );
  });
});

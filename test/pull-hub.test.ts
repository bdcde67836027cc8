// model:pull against a local stand-in for the Hugging Face hub (test/helpers/hub-server.ts): the hub's
// URL layout, CDN redirects for LFS files, Range resume after a dropped connection or an interrupted run,
// checksums, gated repos with HF_TOKEN, HF_ENDPOINT, clear errors; the pulled folder is served. Safetensors
// repos are pulled and converted by model:import's importer (the same bytes as importing them by hand) and
// run on the kernels; GGUF repos are imported as they are (the folder serves the .gguf) and run on the kernels.
import { execFile } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HubError } from '../scripts/import/hub-client.js';
import { renderBar } from '../scripts/import/progress.js';
import { pullModel } from '../scripts/import/pull.js';
import { DOWNLOAD_DIR } from '../scripts/import/pull-safetensors.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { runImport } from '../scripts/model-import.js';
import { presetGgufInput, writeLlamaGguf } from '../scripts/model/gguf-writer.js';
import { PRESETS } from '../scripts/model/presets.js';
import { parsePullArgs } from '../scripts/model-pull.js';
import { collect, loadEngine, modelDir } from './helpers/engines.js';
import { writeHfFolder } from './helpers/hf-folder.js';
import { LocalHub } from './helpers/hub-server.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import { directorySource } from '../src/sources/directory-source.js';

const ROOT = join(import.meta.dirname, '..');
const REPO = 'onnx-community/Tiny-Instruct-ONNX';
const GATED = 'someorg/gated-tiny';
const ODD = 'someorg/t5-small-onnx';
const SAFE = 'HuggingFaceTB/Tiny-Safetensors';
const SAFE_SINGLE = 'someorg/tiny-untied-safetensors';
const BOTH = 'someorg/tiny-onnx-and-safetensors';
const BIASED = 'someorg/tiny-with-biases';
const GGUF = 'someorg/tiny-GGUF';
const EMPTY = 'someorg/only-a-readme';
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

/** A transformers checkpoint (safetensors, `shards` files) as the hub holds one, with a README. */
function safetensorsRepo(name: string, shards: number, preset: 'tiny' | 'tiny-untied' = 'tiny', into?: string): string {
  const d = into ?? join(dir, 'hub', name);
  writeHfFolder(d, PRESETS[preset], DEFAULT_SEED, modelDir(preset), shards);
  writeFileSync(join(d, 'README.md'), `# ${name}\n`);
  return d;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pull-'));
  const biased = safetensorsRepo(BIASED, 1);
  const config = JSON.parse(readFileSync(join(biased, 'config.json'), 'utf8'));
  writeFileSync(join(biased, 'config.json'), JSON.stringify({ ...config, attention_bias: true }));
  const gguf = join(dir, 'hub', GGUF);
  mkdirSync(gguf, { recursive: true });
  writeLlamaGguf(join(gguf, 'tiny-256-Q8_0.gguf'), presetGgufInput('tiny-256', DEFAULT_SEED), 'Q8_0');
  writeLlamaGguf(join(gguf, 'tiny-256-Q4_K_M.gguf'), presetGgufInput('tiny-256', DEFAULT_SEED), 'Q4_K_M');
  writeFileSync(join(gguf, 'README.md'), '# gguf\n');
  const empty = join(dir, 'hub', EMPTY);
  mkdirSync(empty, { recursive: true });
  writeFileSync(join(empty, 'README.md'), '# nothing\n');
  hub = await new LocalHub({
    [REPO]: { dir: repoDir(REPO) },
    [GATED]: { dir: repoDir(GATED), gatedToken: 'hf_secret' },
    [ODD]: { dir: repoDir(ODD, { model_type: 't5' }) },
    [SAFE]: { dir: safetensorsRepo(SAFE, 2) },
    [SAFE_SINGLE]: { dir: safetensorsRepo(SAFE_SINGLE, 1, 'tiny-untied') },
    [BOTH]: { dir: safetensorsRepo(BOTH, 1, 'tiny', repoDir(BOTH)) },
    [BIASED]: { dir: biased },
    [GGUF]: { dir: gguf },
    [EMPTY]: { dir: empty },
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

/** Every file under `a` equals the one at the same path under `b`, and both hold the same files. */
function sameFolders(a: string, b: string): void {
  const list = (d: string): string[] =>
    readdirSync(d, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name).slice(d.length + 1))
      .sort();
  expect(list(a)).toEqual(list(b));
  for (const f of list(a)) same(join(a, f), join(b, f));
}

describe('model:pull of safetensors and GGUF repos', () => {
  it('pulls a sharded safetensors repo, converts it to q4 as model:import does, and the kernels serve it', async () => {
    const dest = out('safetensors');
    const mark = hub.log.length;
    const r = await pullModel({ repo: SAFE, outDir: dest, endpoint: hub.endpoint });
    expect(r).toMatchObject({ format: 'safetensors', dtypes: ['q4'], kvBytesPerToken: 512 });
    expect(r.files.map((f) => f.file).sort()).toEqual([
      'config.json',
      'generation_config.json',
      'model-00001-of-00002.safetensors',
      'model-00002-of-00002.safetensors',
      'model.safetensors.index.json',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
    expect(r.files.every((f) => f.status === 'downloaded')).toBe(true);
    const calls = hub.log.slice(mark);
    expect(calls.filter((e) => e.path.includes('/resolve/')).every((e) => e.path.includes(`/resolve/${r.sha}/`))).toBe(
      true,
    );
    expect(calls.filter((e) => e.path.startsWith('/cdn/') && e.path.endsWith('.safetensors')).length).toBe(2);
    expect(existsSync(join(dest, DOWNLOAD_DIR)), 'the checkpoint is removed once converted').toBe(false);
    expect(r.written.map((f) => f.file)).toContain('onnx/model_q4.onnx');
    expect(r.weightBytes).toBe(r.written.find((f) => f.file === 'onnx/model_q4.onnx')!.bytes);

    // The same bytes as model:import run on the repo's files by hand.
    const byHand = out('safetensors-by-hand');
    runImport({ kind: 'safetensors', paths: [join(dir, 'hub', SAFE)], out: byHand, dtypes: ['q4'] });
    sameFolders(dest, byHand);

    const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(dest), {
      dtype: 'q4',
      kvCacheBytes: 1 << 20,
    });
    try {
      expect(engine.stats().runner).toBe('kernels');
      const { done } = await collect(engine, { prompt: 'Hello', max_tokens: 8, temperature: 0, ignore_eos: true });
      expect(done.tokenIds.length).toBe(8);
    } finally {
      await engine.runner.release();
    }
  });

  it('one model.safetensors, untied, in the dtypes asked for', async () => {
    const dest = out('safetensors-single');
    const r = await pullModel({ repo: SAFE_SINGLE, outDir: dest, endpoint: hub.endpoint, dtypes: ['fp32', 'int8'] });
    expect(r.dtypes).toEqual(['fp32', 'int8']);
    expect(r.files.map((f) => f.file)).toContain('model.safetensors');
    const byHand = out('safetensors-single-by-hand');
    runImport({ kind: 'safetensors', paths: [join(dir, 'hub', SAFE_SINGLE)], out: byHand, dtypes: ['fp32', 'int8'] });
    sameFolders(dest, byHand);
    await expect(
      pullModel({ repo: SAFE_SINGLE, outDir: out('bad-dtype'), endpoint: hub.endpoint, dtypes: ['q3'] }),
    ).rejects.toThrow(/--dtype: q3 is not one of fp32, fp16, int8, q4, all/);
  });

  it('a repo with onnx/ and safetensors: the ONNX export by default, the checkpoint with --format safetensors', async () => {
    const onnx = await pullModel({ repo: BOTH, outDir: out('both-onnx'), endpoint: hub.endpoint });
    expect(onnx).toMatchObject({ format: 'onnx', dtypes: ['q4'] });
    expect(onnx.files.some((f) => f.file.endsWith('.safetensors'))).toBe(false);
    const converted = await pullModel({
      repo: BOTH,
      outDir: out('both-safetensors'),
      endpoint: hub.endpoint,
      format: 'safetensors',
    });
    expect(converted).toMatchObject({ format: 'safetensors', dtypes: ['q4'] });
    expect(converted.files.some((f) => f.file.startsWith('onnx/'))).toBe(false);
    // --dtype on an ONNX repo picks onnx/model_<dtype>.onnx.
    const fp32 = await pullModel({ repo: BOTH, outDir: out('both-fp32'), endpoint: hub.endpoint, dtypes: ['fp32'] });
    expect(fp32.files.map((f) => f.file)).toContain('onnx/model.onnx');
    await expect(pullModel({ repo: SAFE, outDir: out('x'), endpoint: hub.endpoint, format: 'onnx' })).rejects.toThrow(
      /HuggingFaceTB\/Tiny-Safetensors@main has no onnx files \(it has safetensors\)/,
    );
  });

  it('refuses an architecture the importer cannot convert before the weights are downloaded', async () => {
    const mark = hub.log.length;
    await expect(pullModel({ repo: BIASED, outDir: out('biased'), endpoint: hub.endpoint })).rejects.toThrow(
      /someorg\/tiny-with-biases@main: config.json: attention_bias is true/,
    );
    expect(hub.log.slice(mark).some((e) => e.path.endsWith('.safetensors'))).toBe(false);
  });

  it('resumes a shard after a dropped connection; a corrupt shard converts nothing, and the next run fetches only what is missing', async () => {
    const dest = out('safetensors-faults');
    const shard2 = 'model-00002-of-00002.safetensors';
    hub.corrupt.add(shard2);
    try {
      await expect(pullModel({ repo: SAFE, outDir: dest, endpoint: hub.endpoint })).rejects.toThrow(
        /model-00002-of-00002\.safetensors: checksum mismatch \(sha256/,
      );
    } finally {
      hub.corrupt.delete(shard2);
    }
    expect(existsSync(join(dest, 'onnx'))).toBe(false);
    hub.cutAfter.set(shard2, 5_000);
    const mark = hub.log.length;
    const r = await pullModel({ repo: SAFE, outDir: dest, endpoint: hub.endpoint });
    const status = Object.fromEntries(r.files.map((f) => [f.file, f.status]));
    expect(status).toMatchObject({ 'model-00001-of-00002.safetensors': 'present', [shard2]: 'downloaded' });
    expect(hub.log.slice(mark).some((e) => e.path.startsWith('/cdn/') && e.range !== undefined)).toBe(true);
    sameFolders(dest, out('safetensors'));
  });

  it('a GGUF repo: its Q4_K_M file (or the one --file names) imported as it is, runs on the kernels', async () => {
    const r = await pullModel({ repo: GGUF, outDir: out('gguf'), endpoint: hub.endpoint });
    expect(r.format).toBe('gguf');
    expect(r.files.map((f) => f.file)).toEqual(['tiny-256-Q4_K_M.gguf']);
    expect(r.dtypes).toEqual(['gguf']);
    same(join(dir, 'hub', GGUF, 'tiny-256-Q4_K_M.gguf'), join(out('gguf'), 'model.gguf'));
    const engine = await Engine.load(await nodeRuntime('kernels'), directorySource(out('gguf')), {
      kvCacheBytes: 1 << 20,
    });
    expect(engine.stats().runner).toBe('kernels');
    const { done } = await collect(engine, { prompt: 'Hi', max_tokens: 4, temperature: 0, ignore_eos: true });
    expect(done.tokenIds).toHaveLength(4);
    await engine.runner.release();
    const picked = await pullModel({
      repo: GGUF,
      outDir: out('gguf-q8'),
      endpoint: hub.endpoint,
      files: ['tiny-256-Q8_0.gguf'],
    });
    expect(picked.files.map((f) => f.file)).toEqual(['tiny-256-Q8_0.gguf']);
    await expect(
      pullModel({ repo: GGUF, outDir: out('gguf-bad'), endpoint: hub.endpoint, files: ['nope.gguf'] }),
    ).rejects.toThrow(
      /--file: someorg\/tiny-GGUF@main holds tiny-256-Q4_K_M\.gguf, tiny-256-Q8_0\.gguf; name one of them/,
    );
  });

  it('a repo with nothing loadable says what it has', async () => {
    await expect(pullModel({ repo: EMPTY, outDir: out('empty'), endpoint: hub.endpoint })).rejects.toThrow(
      /has nothing the engine can load: no onnx\/model\*\.onnx, no model\.safetensors \(or its index\), no \.gguf \(it has README\.md\)/,
    );
  });

  it('runs as a command: --dtype converts, and the converted files are listed', async () => {
    const dest = out('safetensors-cli');
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'scripts/model-pull.ts'), SAFE, '--dtype', 'q4,int8', '--out', dest],
      { cwd: ROOT, env: { ...process.env, HF_ENDPOINT: hub.endpoint, HF_TOKEN: '' } },
    );
    expect(stdout).toMatch(
      /pulled HuggingFaceTB\/Tiny-Safetensors@[0-9a-f]{12} into .* \(7 downloaded, 0 already there\)/,
    );
    expect(stdout).toMatch(/converted the safetensors checkpoint with model:import's importer:\n.*MiB {2}config\.json/);
    expect(stdout).toMatch(/MiB {2}onnx\/model_int8\.onnx\n.*MiB {2}onnx\/model_q4\.onnx/);
    expect(stderr).toMatch(/converting to q4, int8/);
    expect(parsePullArgs(['a/b', '--dtype', 'all', '--format', 'safetensors'])).toMatchObject({
      dtypes: ['fp32', 'fp16', 'int8', 'q4'],
      format: 'safetensors',
    });
    expect(() => parsePullArgs(['a/b', '--format', 'bin'])).toThrow(/--format is one of onnx, safetensors, gguf/);
  });
});

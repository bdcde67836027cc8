// The GPU host and the object's RemoteRunner over real HTTP in one Node process: the frame codec, the host's
// refusals (secret, model, malformed passes), and an engine whose passes run on the host giving the tokens of
// the same runner in one process, through a host restart (its KV lost and recomputed) and a host gone (the
// requests in flight fail, naming it, and the next ones are served once it is back).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { InvalidRequestError, SequenceFailedError } from '../src/engine/errors.js';
import { HostUnavailableError, httpHostLink } from '../src/engine/runners/remote/host-link.js';
import {
  decodeFrame,
  encodeFrame,
  FrameError,
  HOST_PATHS,
  HOST_PROTOCOL,
  sameSecret,
} from '../src/engine/runners/remote/host-protocol.js';
import { passLogits } from '../src/engine/runners/remote/remote-runner.js';
import { resolveEngineLimits } from '../src/engine/defaults.js';
import { loadHostModel } from '../src/gpu-host/host-model.js';
import type { HostModel } from '../src/gpu-host/gpu-host.js';
import { serveGpuHost, type RunningHost } from '../src/gpu-host/server.js';
import { directorySource } from '../src/sources/directory-source.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { collect, loadEngine, modelDir } from './helpers/engines.js';
import { gpuArgs } from '../scripts/start-args.js';
import { gpuHostVar, type Env } from '../src/env.js';

const SECRET = 'test-secret';
const DTYPE = 'q4';
const request = (prompt: string, max_tokens = 24) => ({ prompt, max_tokens, temperature: 0, ignore_eos: true });
const prompts = ['Once upon a time', 'The sea was calm', 'A dog and a cat'];

let model: HostModel;
let running: RunningHost;
let port: number;
const reference = new Map<string, number[]>();

async function start(): Promise<RunningHost> {
  const r = await serveGpuHost(model, { secret: SECRET, port });
  port = Number(new URL(r.url).port);
  return r;
}

const remoteEngine = (secret = SECRET, name = 'tiny') =>
  nodeRuntime('kernels').then((runtime) =>
    Engine.load(runtime, directorySource(modelDir('tiny')), {
      dtype: DTYPE,
      kvStore: undefined,
      gpuHost: { link: httpHostLink(`http://127.0.0.1:${port}`, secret), model: name, kvDtype: 'fp32' },
    }),
  );

beforeAll(async () => {
  model = await loadHostModel(await nodeRuntime('kernels'), modelDir('tiny'), {
    dtype: DTYPE,
    limits: resolveEngineLimits({}),
  });
  port = 0;
  running = await start();
  const local = await loadEngine('kernels', 'tiny', { dtype: DTYPE });
  for (const prompt of [...prompts, 'long'])
    reference.set(
      prompt,
      (await collect(local, request(prompt, prompt === 'long' ? 200 : 24))).tokens.map((t) => t.tokenId),
    );
  await local.runner.release();
});

afterAll(async () => {
  await running?.close();
});

describe('GPU host frames', () => {
  it('carry a header and binary parts, aligned, both ways', () => {
    const logits = Float32Array.from([1.5, -2, 3.25]);
    const bytes = Uint8Array.from([1, 2, 3, 4, 5]);
    const frame = encodeFrame({ a: 1, b: 'x' }, [logits, bytes, new Int32Array([7, -8])]);
    const { header, parts } = decodeFrame<{ a: number; b: string }>(frame);
    expect(header).toEqual({ a: 1, b: 'x' });
    expect(Array.from(new Float32Array(parts[0].buffer))).toEqual([1.5, -2, 3.25]);
    expect(Array.from(parts[1])).toEqual([1, 2, 3, 4, 5]);
    expect(Array.from(new Int32Array(parts[2].buffer))).toEqual([7, -8]);
  });

  it('refuse what is not a frame', () => {
    expect(() => decodeFrame(new Uint8Array(4))).toThrow(FrameError);
    expect(() => decodeFrame(new Uint8Array(16))).toThrow(/magic/);
    const frame = encodeFrame({}, [new Uint8Array(64)]);
    expect(() => decodeFrame(frame.subarray(0, frame.length - 32))).toThrow(/past the frame/);
  });

  it('lay out logits as each row asked for them', () => {
    const V = 2;
    const logits = passLogits(
      [
        { count: 3, logits: 1 },
        { count: 4, logits: 2 },
      ],
      Float32Array.from([0, 1, 10, 11, 20, 21]),
      V,
    );
    expect(Array.from(logits.last(0))).toEqual([0, 1]);
    expect(Array.from(logits.at(1, 2))).toEqual([10, 11]);
    expect(Array.from(logits.last(1))).toEqual([20, 21]);
    expect(() => logits.at(1, 0)).toThrow(/not asked for/);
    expect(() => passLogits([{ count: 1, logits: 1 }], new Float32Array(3), V)).toThrow(/expected/);
  });

  it('compare secrets whole', () => {
    expect(sameSecret('abc', 'abc')).toBe(true);
    expect(sameSecret('abd', 'abc')).toBe(false);
    expect(sameSecret('ab', 'abc')).toBe(false);
    expect(sameSecret('abcd', 'abc')).toBe(false);
    expect(sameSecret('', 'abc')).toBe(false);
  });
});

describe('a GPU host', () => {
  it('refuses a wrong secret, another model and a malformed pass, and changes nothing', async () => {
    await expect(remoteEngine('wrong')).rejects.toThrow(/refused \(401\): wrong or missing GPU host secret/);
    await expect(remoteEngine(SECRET, 'other')).rejects.toThrow(InvalidRequestError);
    await expect(remoteEngine(SECRET, 'other')).rejects.toThrow(/serves "tiny", not "other"/);
    const before = running.host.sessionCount;
    const link = httpHostLink(running.url, SECRET);
    const open = {
      protocol: HOST_PROTOCOL,
      model: 'tiny',
      numBlocks: 8,
      blockSize: 16,
      kvDtype: 'fp32',
      limits: resolveEngineLimits({}),
    };
    const { epoch } = decodeFrame<{ epoch: string }>(await link.post(HOST_PATHS.open, encodeFrame(open))).header;
    const pass = (rows: unknown, tokens: number[]) =>
      link.post(HOST_PATHS.pass, encodeFrame({ epoch, rows, ops: [] }, [Int32Array.from(tokens)]));
    await expect(pass([{ blocks: [99], start: 0, count: 1, logits: 1 }], [1])).rejects.toThrow(/outside the pool/);
    await expect(pass([{ blocks: [0], start: 0, count: 2, logits: 1 }], [1])).rejects.toThrow(/2 tokens, 1 were sent/);
    await expect(pass([{ blocks: [0], start: 0, count: 1, logits: 1 }], [1e6])).rejects.toThrow(/vocabulary/);
    await expect(link.post(HOST_PATHS.pass, new Uint8Array(16))).rejects.toThrow(/refused \(400\)/);
    const lost = decodeFrame<{ lost: boolean }>(
      await link.post(HOST_PATHS.pass, encodeFrame({ epoch: 'nobody', rows: [], ops: [] }, [new Int32Array()])),
    );
    expect(lost.header.lost).toBe(true);
    await link.post(HOST_PATHS.close, encodeFrame({ epoch }));
    expect(running.host.sessionCount).toBe(before);
  });

  it("gives an engine the one-process runner's greedy tokens, batched, and names itself", async () => {
    const engine = await remoteEngine();
    const got = await Promise.all(prompts.map((p) => collect(engine, request(p))));
    expect(got.map((g) => g.tokens.map((t) => t.tokenId))).toEqual(prompts.map((p) => reference.get(p)));
    const stats = engine.stats();
    expect(stats.runner).toBe('kernels');
    expect(stats.host).toMatchObject({ connected: true, runner: 'kernels', backend: 'wasm', adapter: null });
    expect(stats.host!.passes).toBeGreaterThan(20);
    await engine.runner.release();
  });

  it('recomputes after a host restart, and fails the requests in flight while it is gone', async () => {
    const engine = await remoteEngine();
    const first = await collect(engine, request(prompts[0]));
    expect(first.tokens.map((t) => t.tokenId)).toEqual(reference.get(prompts[0]));
    // Restarted between two requests: the session is unknown, the KV recomputed, the tokens the same.
    await running.close();
    running = await start();
    const again = await collect(engine, request(prompts[1]));
    expect(again.tokens.map((t) => t.tokenId)).toEqual(reference.get(prompts[1]));
    expect(engine.stats().kvLosses).toBe(1);
    // Gone mid-stream: the request ends with an error naming the host, nothing else is touched.
    const events: unknown[] = [];
    const stream = engine.generate(request('long', 200));
    let failure: unknown;
    try {
      for await (const event of stream) {
        events.push(event);
        if (events.length === 5) await running.close();
      }
    } catch (err) {
      failure = err;
    }
    expect(failure).toBeInstanceOf(SequenceFailedError);
    expect((failure as Error).cause).toBeInstanceOf(HostUnavailableError);
    expect((failure as Error).message).toMatch(/GPU host at 127\.0\.0\.1:\d+ cannot be reached/);
    // An engine loading while the host is down is told so (the object answers 503 with Retry-After).
    await expect(remoteEngine()).rejects.toThrow(HostUnavailableError);
    // Back: the next request is served from a new session, with the one-process tokens.
    running = await start();
    const back = await collect(engine, request('long', 200));
    expect(back.tokens.map((t) => t.tokenId)).toEqual(reference.get('long'));
    expect(engine.stats().host!.reconnects).toBeGreaterThanOrEqual(2);
    await engine.runner.release();
  });
});

describe('configuring a GPU host', () => {
  it('reads GPU_HOST_URL with its secret, and refuses one without', () => {
    const env = (vars: Record<string, string>) => vars as unknown as Env;
    expect(gpuHostVar(env({}))).toBeUndefined();
    expect(gpuHostVar(env({ GPU_HOST_URL: ' ' }))).toBeUndefined();
    expect(gpuHostVar(env({ GPU_HOST_URL: 'https://gpu.example', GPU_HOST_SECRET: 's' }))).toEqual({
      url: 'https://gpu.example',
      secret: 's',
    });
    expect(() => gpuHostVar(env({ GPU_HOST_URL: 'https://gpu.example' }))).toThrow(/GPU_HOST_SECRET is not/);
    expect(() => gpuHostVar(env({ GPU_HOST_URL: 'gpu.example', GPU_HOST_SECRET: 's' }))).toThrow(/http\(s\) URL/);
  });

  it('takes --gpu and --gpu-backend out of npm start arguments', () => {
    expect(gpuArgs(['--port', '9000'])).toEqual({ gpu: undefined, rest: ['--port', '9000'] });
    expect(gpuArgs(['--gpu', '--var', 'MODEL:tiny'])).toEqual({
      gpu: { backend: 'auto' },
      rest: ['--var', 'MODEL:tiny'],
    });
    expect(gpuArgs(['--gpu-backend', 'kernels']).gpu).toEqual({ backend: 'kernels' });
    expect(gpuArgs(['--gpu', '--gpu-backend=webgpu']).gpu).toEqual({ backend: 'webgpu' });
  });
});

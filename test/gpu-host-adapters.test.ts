// LoRA adapters through a GPU host (src/gpu-host/, remote-runner.ts), over real HTTP in one Node process, the host
// on the kernels (the WGSL pass's own adapter tests are test/webgpu/wgsl-lora.test.ts):
//   - an engine whose passes run on the host serves an adapter by name: its greedy tokens, and those of the base
//     batched beside it, are the one-process engine's;
//   - a host that keeps no adapters says so at open, and the engine refuses adapters by name (unsupported_model);
//   - a host whose adapter files are not the object's refuses the adapter when a request names it (before any pass
//     carries it), and changes nothing: other adapters and the base's requests go on being served.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { TEST_ADAPTERS } from '../scripts/model/lora-adapters.js';
import { resolveEngineLimits } from '../src/engine/defaults.js';
import { Engine } from '../src/engine/engine.js';
import type { LoraAdapter } from '../src/engine/adapters/lora-adapter.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { httpHostLink } from '../src/engine/runners/remote/host-link.js';
import { loadHostModel } from '../src/gpu-host/host-model.js';
import { serveGpuHost, type RunningHost } from '../src/gpu-host/server.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect, modelDir } from './helpers/engines.js';

const SECRET = 'adapter-secret';
const DTYPE = 'q4';
const request = (prompt: string) => ({ prompt, max_tokens: 16, temperature: 0, ignore_eos: true });
const prompts = ['Once upon a time', 'The sea was calm'];

const hosts: RunningHost[] = [];
let dir: string;

async function host(folder: string, adapterCacheBytes?: number): Promise<RunningHost> {
  const model = await loadHostModel(await nodeRuntime('kernels'), folder, {
    name: 'tiny-lora',
    dtype: DTYPE,
    limits: resolveEngineLimits({}),
    adapterCacheBytes,
  });
  const running = await serveGpuHost(model, { secret: SECRET, port: 0 });
  hosts.push(running);
  return running;
}

const engineOn = async (running: RunningHost) =>
  Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('tiny-lora')), {
    dtype: DTYPE,
    gpuHost: { link: httpHostLink(running.url, SECRET), model: 'tiny-lora', kvDtype: 'fp32' },
  });

async function greedy(engine: Engine, prompt: string, adapter?: LoraAdapter): Promise<number[]> {
  for await (const e of engine.generate(request(prompt), { adapter })) if (e.type === 'done') return e.tokenIds;
  throw new Error('no done event');
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'host-adapters-'));
});

afterAll(async () => {
  for (const h of hosts) await h.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('LoRA adapters through a GPU host', () => {
  it("gives the one-process engine's tokens for an adapter batched beside the base", async () => {
    const local = await Engine.load(await nodeRuntime('kernels'), directorySource(modelDir('tiny-lora')), {
      dtype: DTYPE,
    });
    const name = TEST_ADAPTERS[3].name;
    const localAdapter = await local.loadAdapter(name);
    const want = {
      base: await Promise.all(prompts.map((p) => greedy(local, p))),
      adapter: await Promise.all(prompts.map((p) => greedy(local, p, localAdapter))),
    };
    await local.runner.release();
    expect(want.adapter).not.toEqual(want.base);

    const engine = await engineOn(await host(modelDir('tiny-lora')));
    try {
      expect(engine.runner.rowAdapters).toBe(true);
      const adapter = await engine.loadAdapter(name);
      const got = await Promise.all(prompts.flatMap((p) => [greedy(engine, p), greedy(engine, p, adapter)]));
      expect(got).toEqual(prompts.flatMap((_p, i) => [want.base[i], want.adapter[i]]));
    } finally {
      await engine.runner.release();
    }
  });

  it('a host that keeps no adapters: the engine refuses them by name', async () => {
    const engine = await engineOn(await host(modelDir('tiny-lora'), 0));
    try {
      expect(engine.runner.rowAdapters).toBe(false);
      const refused = await engine.loadAdapter('qv-r8').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(InvalidRequestError);
      expect(refused).toMatchObject({ code: 'unsupported_model', param: 'model' });
      expect((refused as Error).message).toMatch(
        /'qv-r8' is a LoRA adapter.*a GPU host \(kernels\) that does not run them/,
      );
    } finally {
      await engine.runner.release();
    }
  });

  it("a host whose adapter files are not the object's refuses it at load; the rest is served on", async () => {
    const folder = join(dir, 'tiny-lora');
    cpSync(modelDir('tiny-lora'), folder, { recursive: true });
    // The same adapter, its config changed: another SHA-256 of its files.
    const config = join(folder, 'adapters', 'qv-r8', 'adapter_config.json');
    writeFileSync(config, `${JSON.stringify({ ...JSON.parse(readFileSync(config, 'utf8')), lora_alpha: 8 })}\n`);
    const engine = await engineOn(await host(folder));
    try {
      // Refused when the request names it (the host reads it then), before any pass carries it.
      const refused = await engine.loadAdapter('qv-r8').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(InvalidRequestError);
      expect(refused).toMatchObject({ code: 'invalid_adapter', param: 'model' });
      expect((refused as Error).message).toMatch(
        /adapter 'qv-r8': .*the GPU host's adapters\/qv-r8\/ is not the object's/,
      );
      // The host's own files serve: an adapter it holds alike loads and runs.
      const same = await engine.loadAdapter('attn-r12');
      expect((await greedy(engine, prompts[0], same)).length).toBe(16);
      const base = await collect(engine, request(prompts[1]));
      expect(base.tokens.length).toBe(16);
    } finally {
      await engine.runner.release();
    }
  });
});

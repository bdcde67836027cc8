// A GGUF folder (Q4_K_M, as model:import gguf writes it) inside workerd: read through the assets binding as
// a stream, its quantised blocks placed in the kernels' linear memory, with no MODEL_DTYPE or dtype given
// (config.json's gguf_file makes the file the folder's default weights). Same greedy tokens as in Node.
import { env } from 'cloudflare:workers';
import { expect, inject, it } from 'vitest';
import { workerdWasmRuntime } from '../../src/backends/ort-web-workerd.js';
import { Engine } from '../../src/engine/engine.js';
import { fetchSource } from '../../src/sources/fetch-source.js';
import { WORKERD_CASES } from './cases.js';

it('a Q4_K_M GGUF folder runs on the kernels in workerd and gives Node’s greedy tokens', async () => {
  const engine = await Engine.load(
    workerdWasmRuntime('auto'),
    fetchSource(env.MODELS, 'http://models.local/tiny-gguf/'),
  );
  try {
    expect(engine.stats().runner).toBe('kernels');
    let tokens: number[] = [];
    for await (const event of engine.generate(WORKERD_CASES.greedy)) if (event.type === 'done') tokens = event.tokenIds;
    expect(tokens).toHaveLength(WORKERD_CASES.greedy.max_tokens!);
    expect(tokens).toEqual(inject('nodeGgufGreedy'));
  } finally {
    await engine.runner.release();
  }
});

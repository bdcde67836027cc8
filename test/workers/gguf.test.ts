// GGUF folders (as model:import gguf writes them) inside workerd: read through the assets binding as a stream,
// their quantised blocks placed in the kernels' linear memory, with no MODEL_DTYPE or dtype given (config.json's
// gguf_file makes the file the folder's default weights). Same greedy tokens as in Node, for a Llama block in
// Q4_K_M and Qwen2's, Qwen3's and Gemma 3's blocks in Q8_0.
import { env } from 'cloudflare:workers';
import { expect, inject, it } from 'vitest';
import { workerdWasmRuntime } from '../../src/backends/ort-web-workerd.js';
import { Engine } from '../../src/engine/engine.js';
import { fetchSource } from '../../src/sources/fetch-source.js';
import { GGUF_FOLDERS, WORKERD_CASES } from './cases.js';

it.each(GGUF_FOLDERS)('%s (%s, %s) runs on the kernels in workerd and gives Node’s greedy tokens', async (folder) => {
  const engine = await Engine.load(
    workerdWasmRuntime('auto'),
    fetchSource(env.MODELS, `http://models.local/${folder}/`),
  );
  try {
    expect(engine.stats().runner).toBe('kernels');
    let tokens: number[] = [];
    for await (const event of engine.generate(WORKERD_CASES.greedy)) if (event.type === 'done') tokens = event.tokenIds;
    expect(tokens).toHaveLength(WORKERD_CASES.greedy.max_tokens!);
    expect(tokens).toEqual(inject('nodeGgufGreedy')[folder]);
  } finally {
    await engine.runner.release();
  }
});

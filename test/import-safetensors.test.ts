// model:import safetensors: a Hugging Face Llama folder written here (sharded, F32 + BF16 tensors, tied and
// untied) is imported in every dtype and served by the engine; fp32 matches the reference forward pass run
// on the stored weights, the quantised variants stay within the engine's quantisation bounds.
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseImportArgs, runImport } from '../scripts/model-import.js';
import { PRESETS, type LlamaShape } from '../scripts/model/presets.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import type { ModelDtype } from '../src/engine/model/model-files.js';
import { directorySource } from '../src/sources/directory-source.js';
import { argmax, collect, maxAbsDiff, modelDir } from './helpers/engines.js';
import { writeHfFolder } from './helpers/hf-folder.js';
import { LlamaReference } from './reference/llama-reference.js';

const STEPS = 16;
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hf-import-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Teacher-forced: worst |engine - reference| and relative RMS error of the logits over STEPS steps. */
async function compare(
  engine: Engine,
  ref: LlamaReference,
  prompt: number[],
): Promise<{ worst: number; relRms: number; agree: boolean }> {
  ref.reset();
  const kv = engine.kv.create();
  let feed = prompt;
  let refLogits = ref.forward(prompt, 0).at(-1)!;
  let pos = prompt.length;
  let worst = 0;
  let err = 0;
  let norm = 0;
  let agree = true;
  for (let s = 0; s < STEPS; s++) {
    engine.kv.reserve(kv, feed.length);
    const logits = (await engine.runner.forward([{ kv, tokens: feed }])).last(0);
    worst = Math.max(worst, maxAbsDiff(logits, refLogits));
    for (let i = 0; i < logits.length; i++) {
      err += (logits[i] - refLogits[i]) ** 2;
      norm += refLogits[i] ** 2;
    }
    agree &&= argmax(logits) === argmax(refLogits);
    feed = [argmax(refLogits)];
    refLogits = ref.forward(feed, pos++)[0];
  }
  engine.kv.free(kv);
  return { worst, relRms: Math.sqrt(err / norm), agree };
}

for (const [name, shape] of [
  ['tied, GQA, 2 shards', PRESETS.tiny],
  ['untied, 3 shards', { ...PRESETS.tiny, tieWordEmbeddings: false }],
] as [string, LlamaShape][]) {
  describe(`safetensors (${name}) -> engine`, () => {
    let ref: LlamaReference;
    let out: string;
    beforeAll(() => {
      const hf = join(dir, `hf-${name.length}`);
      const stored = writeHfFolder(hf, shape, 11, modelDir('tiny'), name.includes('3') ? 3 : 2);
      ref = new LlamaReference(JSON.parse(readFileSync(join(hf, 'config.json'), 'utf8')), stored);
      out = join(dir, `out-${name.length}`);
      runImport(parseImportArgs(['safetensors', hf, '--out', out, '--dtype', 'all']));
    });

    it('fp32: logits within 1e-4 of the reference, greedy tokens equal', async () => {
      const engine = await Engine.load(await nodeRuntime('cpu'), directorySource(out), { kvCacheBytes: 4 << 20 });
      try {
        const prompt = engine.tokenizer.encode('Hello, world');
        const { worst, agree } = await compare(engine, ref, prompt);
        expect(worst).toBeLessThan(1e-4);
        expect(agree).toBe(true);
        const { done } = await collect(engine, {
          prompt_ids: prompt,
          max_tokens: STEPS,
          temperature: 0,
          ignore_eos: true,
        });
        expect(done.tokenIds).toEqual(ref.greedy(prompt, STEPS));
      } finally {
        await engine.runner.release();
      }
    });

    // Bounds as in engine-parity.test.ts (int8 ~0.03-0.04, q4 ~0.45 on these very peaked random weights).
    for (const [dtype, bound] of [
      ['fp16', 5e-3],
      ['int8', 0.08],
      ['q4', 0.7],
    ] as [ModelDtype, number][]) {
      it(`${dtype}: relative RMS logit error below ${bound}`, async () => {
        const engine = await Engine.load(await nodeRuntime('cpu'), directorySource(out), {
          kvCacheBytes: 4 << 20,
          dtype,
        });
        try {
          const { relRms } = await compare(engine, ref, engine.tokenizer.encode('Hello, world'));
          expect(relRms).toBeLessThan(bound);
        } finally {
          await engine.runner.release();
        }
      });
    }
  });
}

describe('model:import safetensors refuses what the graph does not compute', () => {
  it.each([
    [
      'model_type phi3',
      { model_type: 'phi3' },
      /model_type "phi3" cannot be imported \(importable: llama, mistral, qwen2, qwen3, gemma3_text\)/,
    ],
    ['attention biases', { attention_bias: true }, /attention_bias is true/],
    ['rope scaling', { rope_scaling: { rope_type: 'llama3', factor: 8 } }, /rope_scaling .* is set/],
    ['gelu', { hidden_act: 'gelu' }, /hidden_act "gelu" is not silu/],
  ])('%s', (_, patch, message) => {
    const hf = join(dir, `bad-${Object.keys(patch)[0]}`);
    writeHfFolder(hf, PRESETS.tiny, 1, modelDir('tiny'), 1);
    const config = JSON.parse(readFileSync(join(hf, 'config.json'), 'utf8'));
    writeFileSync(join(hf, 'config.json'), JSON.stringify({ ...config, ...patch }));
    expect(() => runImport(parseImportArgs(['safetensors', hf, '--out', join(dir, 'never')]))).toThrow(message);
  });

  it('a shard the index names but the folder lacks, and a tensor of the wrong shape', () => {
    const hf = join(dir, 'bad-shards');
    writeHfFolder(hf, PRESETS.tiny, 1, modelDir('tiny'), 2);
    rmSync(join(hf, 'model-00002-of-00002.safetensors'));
    expect(() => runImport(parseImportArgs(['safetensors', hf, '--out', join(dir, 'never')]))).toThrow(
      /names shard model-00002-of-00002.safetensors, which is not in/,
    );
    const hf2 = join(dir, 'bad-shape');
    writeHfFolder(hf2, PRESETS.tiny, 1, modelDir('tiny'), 1);
    const config = JSON.parse(readFileSync(join(hf2, 'config.json'), 'utf8'));
    writeFileSync(join(hf2, 'config.json'), JSON.stringify({ ...config, intermediate_size: 192 }));
    expect(() => runImport(parseImportArgs(['safetensors', hf2, '--out', join(dir, 'never')]))).toThrow(
      /gate_proj.weight: shape \[176,64\] does not match config.json/,
    );
  });

  it('a tensor config.json does not describe (an o_proj bias) is refused, not dropped', () => {
    const hf = join(dir, 'bad-extra');
    const bias = { dims: [64], data: new Float32Array(64).fill(1) };
    writeHfFolder(hf, PRESETS.tiny, 1, modelDir('tiny'), 1, {
      extra: new Map([['model.layers.1.self_attn.o_proj.bias', bias]]),
    });
    expect(() => runImport(parseImportArgs(['safetensors', hf, '--out', join(dir, 'never')]))).toThrow(
      /checkpoint tensor model.layers.1.self_attn.o_proj.bias is not part of a llama model/,
    );
  });
});

// model:import safetensors of Qwen2, Qwen3 and text-only Gemma 3: a Hugging Face folder written here as
// transformers saves one (test/helpers/hf-folder.ts: (out, in) matrices in F32 and BF16 over two shards, each
// architecture's config keys as the hub's checkpoints have them) becomes a GGUF folder the kernels run.
//   - fp32 (F32 file): the float64 reference on the checkpoint's own config and stored weights, greedy token for
//     token, and its last-position logits to 1e-5 (relative RMS), architectures.test.ts's bound for F32 files.
//   - int8 (Q8_0 file): last-position logits within 8-bit activations' error (0.08, import-safetensors.test.ts's
//     int8 bound; measured 1.2e-2 to 6.2e-2, Qwen2's biases the most) of the reference on the file's dequantised
//     weights, and within 0.12 of it on the checkpoint's (2.2e-2 to 8.0e-2). Not its greedy tokens: the kernels
//     quantise activations to 8 bits as ggml does, and greedy runs parted from the reference at top-2 gaps up to
//     0.41 (logit std 8).
//   - The folder: config.json is what `model:import gguf` makes of the same file; the tokenizer files are the
//     checkpoint's own; the file's tokenizer metadata reads back to a tokenizer that encodes alike.
//   - Refusals name what is not imported, and write nothing.
//   - model:pull of such a repo writes the folder model:import writes from the same files, byte for byte.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ggufFolderFiles } from '../scripts/import/gguf.js';
import { pullModel } from '../scripts/import/pull.js';
import { ggufTokenizerFiles } from '../scripts/import/gguf-tokenizer.js';
import { parseImportArgs, runImportAsync } from '../scripts/model-import.js';
import { PRESETS, type PresetName } from '../scripts/model/presets.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import { ggmlTypeName } from '../src/engine/formats/gguf/ggml-types.js';
import { readGgufHeader } from '../src/engine/formats/gguf/gguf-header.js';
import { directorySource } from '../src/sources/directory-source.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { collect, lastLogits, modelDir, relError } from './helpers/engines.js';
import { ggufWeights } from './helpers/gguf-weights.js';
import { writeHfFolder } from './helpers/hf-folder.js';
import { LocalHub } from './helpers/hub-server.js';
import type { Tensor } from './reference/onnx-weights.js';
import { LlamaReference, type LlamaConfig } from './reference/llama-reference.js';

const STEPS = 24;
const ARCHS: PresetName[] = ['tiny-qwen2', 'tiny-qwen3', 'tiny-gemma3'];

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'import-archs-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const json = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;

/** The preset's checkpoint, written once: its folder, config.json as the reference reads it, the stored weights. */
const checkpoints = new Map<PresetName, { hf: string; config: LlamaConfig; stored: Map<string, Tensor> }>();
function checkpoint(preset: PresetName) {
  let c = checkpoints.get(preset);
  if (!c) {
    const hf = join(dir, `hf-${preset}`);
    const stored = writeHfFolder(hf, PRESETS[preset], DEFAULT_SEED, modelDir('tiny'));
    // Gemma 3's config.json leaves tie_word_embeddings to Gemma3TextConfig's default, which ties them.
    const config = { tie_word_embeddings: true, ...json(join(hf, 'config.json')) } as LlamaConfig;
    c = { hf, config, stored };
    checkpoints.set(preset, c);
  }
  return c;
}

async function imported(preset: PresetName, dtype: string) {
  const { hf } = checkpoint(preset);
  const out = join(dir, `${preset}-${dtype}`);
  await runImportAsync(parseImportArgs(['safetensors', hf, '--out', out, '--dtype', dtype]));
  const bytes = new Uint8Array(readFileSync(join(out, 'model.gguf')));
  return { out, bytes, header: (await readGgufHeader(bytes)).header };
}

const loadKernels = async (folder: string) =>
  Engine.load(await nodeRuntime('kernels'), directorySource(folder), { kvCacheBytes: 2 << 20 });

const request = { prompt: 'Biases and norms, per head', max_tokens: STEPS, temperature: 0, ignore_eos: true };

describe.each(ARCHS)('%s from safetensors on the kernels', (preset) => {
  it('fp32: an F32 GGUF; the reference greedy token for token, and its logits to 1e-5', async () => {
    const { hf, config, stored } = checkpoint(preset);
    const { out, header } = await imported(preset, 'fp32');
    expect(existsSync(join(out, 'onnx'))).toBe(false);
    expect(new Set(header.tensors.filter((t) => t.ne.length === 2).map((t) => ggmlTypeName(t.type)))).toEqual(
      new Set(['F32']),
    );
    // The folder is what `model:import gguf` makes of the file, but for the checkpoint's own tokenizer files.
    const fromGguf = ggufFolderFiles(header);
    expect(json(join(out, 'config.json'))).toEqual(fromGguf.config);
    expect(json(join(out, 'generation_config.json'))).toEqual(json(join(hf, 'generation_config.json')));
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) expect(json(join(out, f))).toEqual(json(join(hf, f)));

    const engine = await loadKernels(out);
    try {
      expect(engine.stats().runner).toBe('kernels');
      const prompt = engine.tokenizer.encode(request.prompt);
      const ref = new LlamaReference(config, stored);
      const want = ref.greedy(prompt, STEPS);
      expect((await collect(engine, request)).done.tokenIds).toEqual(want);
      expect(new Set(want).size).toBeGreaterThan(8); // not one token over and over
      const err = relError(
        await lastLogits(engine, prompt),
        new LlamaReference(config, stored).forward(prompt, 0).at(-1)!,
      );
      console.log(`${preset} fp32: relative logit error ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-5);
    } finally {
      await engine.runner.release();
    }
  });

  it('int8: a Q8_0 GGUF; within 8-bit error of the reference on its dequantised weights', async () => {
    const { config, stored } = checkpoint(preset);
    const { out, bytes, header } = await imported(preset, 'int8');
    expect(ggmlTypeName(header.tensors.find((t) => t.name === 'blk.0.attn_q.weight')!.type)).toBe('Q8_0');
    const dequantised = ggufWeights(bytes, header, PRESETS[preset]);
    const engine = await loadKernels(out);
    try {
      const prompt = engine.tokenizer.encode(request.prompt);
      const logits = await lastLogits(engine, prompt);
      const err = relError(logits, new LlamaReference(config, dequantised).forward(prompt, 0).at(-1)!);
      // The dequantised weights come back through the writer's mapping undone, so they alone would not see
      // a mapping error: the checkpoint's own weights do, at the weights' 8-bit error besides.
      const errStored = relError(logits, new LlamaReference(config, stored).forward(prompt, 0).at(-1)!);
      console.log(
        `${preset} int8: relative logit error ${err.toExponential(2)} against the dequantised file, ${errStored.toExponential(2)} against the checkpoint`,
      );
      expect(err).toBeLessThan(0.08);
      expect(errStored).toBeLessThan(0.12);
    } finally {
      await engine.runner.release();
    }
  });
});

describe('the GGUF file beside the tokenizer files', () => {
  it("its tokenizer metadata reads back to the checkpoint's tokenizer", async () => {
    const { out, header } = await imported('tiny-qwen3', 'fp32');
    const files = ggufTokenizerFiles(header.metadata, PRESETS['tiny-qwen3'].maxPositionEmbeddings);
    const fromMeta = TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig);
    const own = TextTokenizer.fromJson(json(join(out, 'tokenizer.json')), json(join(out, 'tokenizer_config.json')));
    for (const text of ['Checkpoints, converted on arrival', "It's 2026: <|im_start|>user\n  café\t"])
      expect(fromMeta.encode(text)).toEqual(own.encode(text));
    expect(files.tokenizerConfig.chat_template).toBe(json(join(out, 'tokenizer_config.json')).chat_template);
  });

  it('fp16 writes F16 and q4 Q4_0 matrices, norms and biases F32', async () => {
    for (const [dtype, type] of [
      ['fp16', 'F16'],
      ['q4', 'Q4_0'],
    ]) {
      const { header } = await imported('tiny-qwen2', dtype);
      const types = (end: string) =>
        new Set(header.tensors.filter((t) => t.name.endsWith(end)).map((t) => ggmlTypeName(t.type)));
      expect(types('attn_q.weight')).toEqual(new Set([type]));
      expect(types('attn_q.bias')).toEqual(new Set(['F32']));
      expect(types('attn_norm.weight')).toEqual(new Set(['F32']));
    }
  });
});

describe('model:import safetensors refuses by name what it does not import', () => {
  it.each([
    ['tiny-qwen2', 'a Qwen2 MoE', { model_type: 'qwen2_moe' }, /model_type qwen2_moe is a mixture of experts/],
    ['tiny-qwen3', 'a Qwen3 MoE', { model_type: 'qwen3_moe' }, /model_type qwen3_moe is a mixture of experts/],
    ['tiny-gemma3', 'Gemma 3 multimodal', { model_type: 'gemma3' }, /model_type gemma3 is Gemma 3's multimodal/],
    [
      'tiny-qwen3',
      'rope_scaling',
      { rope_scaling: { rope_type: 'yarn', factor: 4 } },
      /rope_scaling \{"rope_type":"yarn","factor":4\} is set; a qwen3 checkpoint/,
    ],
    ['tiny-qwen3', 'an o_proj bias', { attention_bias: true }, /attention_bias is true/],
    ['tiny-qwen2', 'a sliding window', { use_sliding_window: true }, /use_sliding_window is true/],
    ['tiny-gemma3', 'logit soft-capping', { final_logit_softcapping: 30 }, /final_logit_softcapping 30 is set/],
    ['tiny-gemma3', 'attention soft-capping', { attn_logit_softcapping: 50 }, /attn_logit_softcapping 50 is set/],
    [
      'tiny-gemma3',
      'another query scale',
      { query_pre_attn_scalar: 168 },
      /query_pre_attn_scalar 168 is not head_dim 32/,
    ],
    [
      'tiny-gemma3',
      'another local RoPE base',
      { rope_local_base_freq: 20000 },
      /rope_local_base_freq 20000 is not 10000/,
    ],
    [
      'tiny-gemma3',
      'another layer pattern (transformers 4.50 keys)',
      { layer_types: undefined, _sliding_window_pattern: undefined, sliding_window_pattern: 3 },
      /sliding_window_pattern 3 is not every 6th layer global/,
    ],
    [
      'tiny-gemma3',
      'every layer global',
      { layer_types: Array(6).fill('full_attention') },
      /layer_types \["full_attention",.*\] is not every 6th layer global/,
    ],
    [
      'tiny-gemma3',
      'another activation',
      { hidden_activation: 'gelu' },
      /hidden_activation "gelu" is not gelu_pytorch_tanh/,
    ],
  ] as [PresetName, string, Record<string, unknown>, RegExp][])('%s: %s', async (preset, what, patch, message) => {
    const hf = join(dir, `bad-${what.replaceAll(' ', '-')}`);
    writeHfFolder(hf, PRESETS[preset], 1, modelDir('tiny'), 1);
    writeFileSync(join(hf, 'config.json'), JSON.stringify({ ...json(join(hf, 'config.json')), ...patch }));
    const out = join(dir, `never-${what.replaceAll(' ', '-')}`);
    await expect(runImportAsync(parseImportArgs(['safetensors', hf, '--out', out]))).rejects.toThrow(message);
    expect(existsSync(out)).toBe(false);
  });

  it('several dtypes: one GGUF file of one type per folder', async () => {
    const out = join(dir, 'never-all');
    await expect(
      runImportAsync(parseImportArgs(['safetensors', checkpoint('tiny-qwen3').hf, '--out', out, '--dtype', 'all'])),
    ).rejects.toThrow(/--dtype fp32,fp16,int8,q4: a qwen3 checkpoint becomes one GGUF file/);
    expect(existsSync(out)).toBe(false);
  });
});

describe('model:pull of a Qwen3 safetensors repo', () => {
  it('writes the GGUF folder model:import writes, byte for byte; several dtypes are refused before the weights come', async () => {
    const repo = 'someorg/tiny-qwen3';
    const repoDir = join(dir, 'hub', repo);
    writeHfFolder(repoDir, PRESETS['tiny-qwen3'], DEFAULT_SEED, modelDir('tiny'));
    const hub = await new LocalHub({ [repo]: { dir: repoDir } }).start();
    try {
      const dest = join(dir, 'pulled');
      const r = await pullModel({ repo, outDir: dest, endpoint: hub.endpoint });
      expect(r.dtypes).toEqual(['q4']);
      expect(r.weightBytes).toBe(r.written.find((f) => f.file === 'model.gguf')!.bytes);
      const byHand = join(dir, 'pulled-by-hand');
      await runImportAsync(parseImportArgs(['safetensors', repoDir, '--out', byHand, '--dtype', 'q4']));
      for (const { file } of r.written)
        expect(readFileSync(join(dest, file)).equals(readFileSync(join(byHand, file))), file).toBe(true);

      const engine = await loadKernels(dest);
      try {
        const { done } = await collect(engine, { ...request, max_tokens: 8 });
        expect(done.tokenIds.length).toBe(8);
      } finally {
        await engine.runner.release();
      }

      const mark = hub.log.length;
      const all = { repo, outDir: join(dir, 'pulled-all'), endpoint: hub.endpoint, dtypes: ['fp32', 'int8'] };
      await expect(pullModel(all)).rejects.toThrow(/--dtype fp32,int8: a qwen3 checkpoint becomes one GGUF file/);
      expect(hub.log.slice(mark).some((e) => e.path.endsWith('.safetensors'))).toBe(false);
    } finally {
      await hub.stop();
    }
  });
});

// `model:import -- gguf` on files our writer makes, in both tokenizer flavours: the folder's config and
// tokenizer files, the weights copied unchanged, our tokenizer encoding as llama.cpp (wllama) does on the
// corpus and on edge cases, and every refusal named with nothing written.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nonUtf8TokenIds } from '../scripts/bench/wllama-node.js';
import { importGguf } from '../scripts/import/gguf.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { parseImportArgs } from '../scripts/model-import.js';
import { writeGguf, type MetaValue } from '../scripts/model/gguf-file.js';
import { SPM_IDS } from '../scripts/model/gguf-tokenizer-meta.js';
import { llamaGgufMeta, llamaTensors, presetGgufInput, writeLlamaGguf } from '../scripts/model/gguf-writer.js';
import { PRESETS } from '../scripts/model/presets.js';
import { readCorpus } from '../scripts/tokenizer/build-tokenizer.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { modelDir } from './helpers/engines.js';
import { loadLlamaCppOracle, type LlamaCppOracle } from './helpers/wllama.js';

let dir: string;
const input = () => presetGgufInput('tiny', DEFAULT_SEED);

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'gguf-import-test-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const readJson = (path: string): Record<string, unknown> => JSON.parse(readFileSync(path, 'utf8'));

async function imported(name: string, write: (path: string) => void): Promise<{ out: string; tok: TextTokenizer }> {
  const path = join(dir, `${name}.gguf`);
  write(path);
  const out = join(dir, name);
  await importGguf(path, out);
  const tok = TextTokenizer.fromJson(
    readJson(join(out, 'tokenizer.json')),
    readJson(join(out, 'tokenizer_config.json')),
  );
  return { out, tok };
}

describe('GGUF import: the folder', () => {
  it('writes config.json from the metadata and copies the file unchanged as model.gguf', async () => {
    const { out } = await imported('tiny-q8', (p) => writeLlamaGguf(p, input(), 'Q8_0'));
    const p = PRESETS.tiny;
    expect(readJson(join(out, 'config.json'))).toMatchObject({
      model_type: 'llama',
      hidden_size: p.hiddenSize,
      num_hidden_layers: p.numLayers,
      num_attention_heads: p.numHeads,
      num_key_value_heads: p.numKvHeads,
      head_dim: p.headDim,
      intermediate_size: p.intermediateSize,
      rms_norm_eps: 1e-5, // stored as float32 9.99999974e-6: written as the decimal it stands for
      rope_theta: 10000,
      max_position_embeddings: p.maxPositionEmbeddings,
      vocab_size: p.vocabSize,
      tie_word_embeddings: true,
      bos_token_id: 1,
      eos_token_id: 2,
    });
    expect(readJson(join(out, 'generation_config.json'))).toMatchObject({ eos_token_id: [2, 0], max_length: 2048 });
    const config = readJson(join(out, 'tokenizer_config.json'));
    expect(config).toMatchObject({ add_bos_token: false, bos_token: '<|im_start|>', eos_token: '<|im_end|>' });
    expect(config.chat_template).toBe(input().chatTemplate);
    expect(readFileSync(join(out, 'model.gguf'))).toEqual(readFileSync(join(dir, 'tiny-q8.gguf')));
  });

  it('an untied model keeps its output.weight: tie_word_embeddings false', async () => {
    const untied = presetGgufInput('tiny-untied', DEFAULT_SEED);
    const { out } = await imported('tiny-untied', (p) => writeLlamaGguf(p, untied, 'F32'));
    expect(readJson(join(out, 'config.json')).tie_word_embeddings).toBe(false);
  });

  it('gpt2 flavour: the tokenizer encodes and decodes as the original tokenizer.json does', async () => {
    const { tok } = await imported('tiny-gpt2', (p) => writeLlamaGguf(p, input(), 'F32'));
    const read = (f: string) => readJson(join(modelDir('tiny'), f));
    const original = TextTokenizer.fromJson(read('tokenizer.json'), read('tokenizer_config.json'));
    const corpus = readCorpus();
    expect(tok.encode(corpus)).toEqual(original.encode(corpus));
    expect(tok.decode(tok.encode(corpus))).toBe(corpus);
  });

  it('llama flavour: SentencePiece with BOS, the ▁ prefix, byte fallback and ChatML markers', async () => {
    const { out, tok } = await imported('tiny-spm', (p) => writeLlamaGguf(p, input(), 'F32', { tokenizer: 'llama' }));
    expect(readJson(join(out, 'tokenizer_config.json'))).toMatchObject({ add_bos_token: true, bos_token: '<s>' });
    expect(readJson(join(out, 'generation_config.json')).eos_token_id).toEqual([SPM_IDS.eos, SPM_IDS.imEnd]);
    expect(tok.encodePrompt('hi')[0]).toBe(SPM_IDS.bos);
    expect(tok.tokenToId('<0x0A>')).toBe(SPM_IDS.firstByte + 10);
    const text = 'The keeper wrote: 東京 🙂\n';
    expect(tok.decode(tok.encode(text))).toBe(text);
    expect(tok.encode('<|im_start|>user')[0]).toBe(SPM_IDS.imStart);
  });
});

describe('GGUF import: the tokenizer encodes as llama.cpp does (wllama)', () => {
  /**
   * The corpus a paragraph at a time: paragraphs whose tokens are all whole characters are compared token
   * for token (up to a budget of tokens, each fed to llama.cpp one by one), every other paragraph by count.
   */
  async function checkCorpus(oracle: LlamaCppOracle, encode: (t: string) => number[], tok: TextTokenizer) {
    const partial = new Set(nonUtf8TokenIds(tok));
    let exact = 0;
    let counted = 0;
    for (const paragraph of readCorpus().split(/(?<=\n\n)/)) {
      const ids = encode(paragraph);
      if (!ids.some((id) => partial.has(id)) && exact + ids.length <= 2000) {
        const r = await oracle.compareTokens(paragraph, ids);
        expect({ paragraph, ...r }).toEqual({
          paragraph,
          equal: true,
          commonPrefix: ids.length,
          llamaCount: ids.length,
        });
        exact += ids.length;
      } else {
        expect({ paragraph, count: await oracle.countTokens(paragraph) }).toEqual({ paragraph, count: ids.length });
        counted++;
      }
    }
    expect(exact).toBeGreaterThan(1500);
    expect(counted).toBeGreaterThan(20);
  }

  const EDGE_CASES = [
    'Hello world',
    '  two leading spaces, and trailing   ',
    'line one\nline two\n\n\nafter blank lines\r\nwindows line',
    'tabs\tand\t\tmore\t',
    "don't, I'll, we've, they're, she'd, it's, I'm",
    'numbers 1234567890 3.14159 1,000,000 2024-06-01',
    'punctuation!!! ...?? (brackets) [x] {y} <z> a-b_c/d\\e',
    '<|im_start|>system\nYou are terse.', // special tokens parsed, text around them
    'one<|im_start|>two',
    ' ',
    'a',
  ];
  /** With end-of-generation tokens inside, which llama.cpp's grammar cannot feed: compared by count. */
  const EOG_CASES = ['user said<|im_end|>\n<|im_start|>assistant\nreply', '<|endoftext|>a<|im_end|>'];

  for (const flavour of ['gpt2', 'llama'] as const) {
    it(`${flavour}: the corpus and edge cases`, { timeout: 600_000 }, async () => {
      const { tok } = await imported(`tok-${flavour}`, (p) =>
        writeLlamaGguf(p, input(), 'F32', { tokenizer: flavour }),
      );
      // gpt2: no BOS, so <|im_start|> leads; llama: the server adds BOS itself, as our encodePrompt does.
      const spm = flavour === 'llama';
      const encode = spm ? (t: string) => tok.encodePrompt(t).slice(1) : (t: string) => tok.encode(t);
      const oracle = await loadLlamaCppOracle(join(dir, `tok-${flavour}.gguf`), {
        lead: spm ? { text: '', id: SPM_IDS.bos } : { text: '<|im_start|>', id: 1 },
        end: { text: '<|im_end|>' },
        separator: spm ? { text: '<|im_start|>', id: SPM_IDS.imStart } : { text: '<|im_start|>', id: 1 },
        encode,
      });
      try {
        for (const text of EDGE_CASES) {
          const ids = encode(text);
          expect({ text, ...(await oracle.compareTokens(text, ids)) }).toMatchObject({ text, equal: true });
          // llama-server's text of generated tokens leaves special tokens out and keeps SentencePiece's
          // leading space, which a decode of the whole sequence strips.
          const ours = tok.decode(ids, { skipSpecialTokens: true });
          expect(await oracle.detokenize(ids)).toBe(spm ? ` ${ours}` : ours);
        }
        // Byte fallback / partial characters and end-of-generation tokens: by count.
        for (const text of ['naïve café 東京 🙂', 'ǅ𝄞\u00a0x', ...EOG_CASES])
          expect({ text, count: await oracle.countTokens(text) }).toEqual({ text, count: encode(text).length });
        // The oracle can fail: one character per token is not how either tokenizer splits "Hello world".
        // and it says where the two part.
        const split = Array.from('Hello world', (c) => encode(c).at(-1)!);
        const whole = encode('Hello world');
        let shared = 0;
        while (split[shared] === whole[shared]) shared++;
        expect(await oracle.compareTokens('Hello world', split)).toEqual({
          equal: false,
          commonPrefix: shared,
          llamaCount: whole.length,
        });
        await checkCorpus(oracle, encode, tok);
      } finally {
        await oracle.exit();
      }
    });
  }
});

describe('GGUF import: refusals', () => {
  /** A tiny F32 file with metadata edited and tensors kept. */
  function variant(name: string, edit: (meta: [string, MetaValue][]) => void, tokenizer?: 'llama'): string {
    const meta = llamaGgufMeta(input(), 'F32', { tokenizer });
    edit(meta);
    const path = join(dir, `${name}.gguf`);
    writeGguf(path, meta, llamaTensors(PRESETS.tiny, input().weights, 'F32'));
    return path;
  }
  const set = (key: string, value: MetaValue) => (meta: [string, MetaValue][]) => {
    const at = meta.findIndex(([k]) => k === key);
    if (at >= 0) meta[at] = [key, value];
    else meta.push([key, value]);
  };
  const refused = async (path: string, message: string) => {
    const out = join(dir, `never-${Math.random()}`);
    await expect(importGguf(path, out)).rejects.toThrow(message);
    expect(existsSync(out)).toBe(false);
  };

  it('names the architecture, tokenizer model or pre-tokenizer it does not take', async () => {
    // A llama file's keys under qwen2's name: a qwen2 block without its biases.
    const asQwen2 = (meta: [string, MetaValue][]) => {
      for (const [i, [key, value]] of meta.entries()) meta[i] = [key.replace(/^llama\./, 'qwen2.'), value];
      set('general.architecture', { type: 'str', value: 'qwen2' })(meta);
    };
    await refused(variant('qwen2', asQwen2), 'GGUF tensor blk.0.attn_q.bias is missing');
    await refused(
      variant('gemma', set('general.architecture', { type: 'str', value: 'gemma' })),
      'GGUF architecture gemma is not supported (llama, qwen2, qwen3, gemma3 are)',
    );
    await refused(
      variant('bert', set('tokenizer.ggml.model', { type: 'str', value: 'bert' })),
      'tokenizer.ggml.model "bert" is not supported',
    );
    await refused(
      variant('pre', set('tokenizer.ggml.pre', { type: 'str', value: 'deepseek-llm' })),
      'tokenizer.ggml.pre "deepseek-llm" is not supported (the pre-tokenizers imported are gpt-2, smollm, llama-bpe, qwen2)',
    );
    await refused(
      variant('scaling', set('llama.rope.scaling.type', { type: 'str', value: 'yarn' })),
      'llama.rope.scaling.type yarn is not supported',
    );
  });

  it('names a tensor type the loader does not read, and a missing or unexpected tensor', async () => {
    const path = join(dir, 'iq.gguf');
    writeLlamaGguf(path, input(), 'F32');
    const bytes = new Uint8Array(readFileSync(path));
    // The type id follows the name, n_dims and two u64 dims in the tensor table.
    const name = new TextEncoder().encode('blk.0.attn_q.weight');
    const at = Buffer.from(bytes).indexOf(Buffer.from(name)) + name.length + 4 + 16;
    new DataView(bytes.buffer).setUint32(at, 16, true); // IQ2_XXS
    writeFileSync(path, bytes);
    await refused(path, 'GGUF tensor blk.0.attn_q.weight is IQ2_XXS, which the loader does not read');

    const meta = llamaGgufMeta(input(), 'F32');
    const tensors = llamaTensors(PRESETS.tiny, input().weights, 'F32');
    writeGguf(
      join(dir, 'missing.gguf'),
      meta,
      tensors.filter((t) => t.name !== 'blk.1.ffn_up.weight'),
    );
    await refused(join(dir, 'missing.gguf'), 'GGUF tensor blk.1.ffn_up.weight is missing');
    const bias = { name: 'blk.0.attn_q.bias', ne: [64], type: 'F32' as const, data: () => new Float32Array(64) };
    writeGguf(join(dir, 'bias.gguf'), meta, [...tensors, bias]);
    await refused(join(dir, 'bias.gguf'), 'GGUF tensor blk.0.attn_q.bias is not part of a llama model');
  });

  it('the CLI takes no --dtype for a GGUF, and the file must be a GGUF', async () => {
    expect(() => parseImportArgs(['gguf', 'x.gguf', '--out', 'o', '--dtype', 'q4'])).toThrow(
      "a GGUF import keeps the file's own types",
    );
    expect(parseImportArgs(['gguf', 'x.gguf', '--out', 'o'])).toEqual({ kind: 'gguf', paths: ['x.gguf'], out: 'o' });
    writeFileSync(join(dir, 'not.gguf'), 'hello, not a model');
    await refused(join(dir, 'not.gguf'), 'not a GGUF file');
  });
});

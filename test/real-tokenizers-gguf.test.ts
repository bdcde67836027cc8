// The real Qwen3 and Gemma 3 vocabularies written into GGUF metadata as llama.cpp's convert_hf_to_gguf.py
// writes them (scripts/model/gguf-tokenizer-hf.ts), imported back through scripts/import/gguf-tokenizer.ts:
// the imported tokenizer must encode the mixed corpus exactly as the published tokenizer.json does.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readGgufFileHeader } from '../scripts/import/gguf.js';
import { ggufTokenizerFiles } from '../scripts/import/gguf-tokenizer.js';
import { type MetaValue, writeGguf } from '../scripts/model/gguf-file.js';
import {
  generateMerges,
  hfTokenizerMeta,
  type HfTokenizerInput,
  sentencePieceFromTokenizerJson,
} from '../scripts/model/gguf-tokenizer-hf.js';
import { TOKEN_TYPE } from '../scripts/model/gguf-tokenizer-meta.js';
import { readRealTokenizer, type RealTokenizerName } from '../scripts/tokenizer/real-tokenizers.js';
import { GgufMetadata } from '../src/engine/formats/gguf/gguf-metadata.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { MIXED_CORPUS } from './helpers/mixed-corpus.js';

/** vocab_size and the special ids of Qwen/Qwen3-0.6B's and google/gemma-3-270m-it's config.json. */
const MODEL_CONFIG: Record<RealTokenizerName, { vocabSize: number; modelConfig: Record<string, unknown> }> = {
  qwen3: { vocabSize: 151_936, modelConfig: { bos_token_id: 151_643, eos_token_id: 151_645 } },
  gemma3: { vocabSize: 262_144, modelConfig: { bos_token_id: 2, eos_token_id: [1, 106], pad_token_id: 0 } },
};

const input = (name: RealTokenizerName): HfTokenizerInput => ({ ...readRealTokenizer(name), ...MODEL_CONFIG[name] });
/** What the safetensors import writes: the flavour and Qwen's pre-tokenizer name found from tokenizer.json itself. */
const metaOf = (name: RealTokenizerName) => hfTokenizerMeta(input(name));

/** The metadata as the GGUF reader hands it on (typed arrays for numbers), without a file in between. */
function asMetadata(entries: [string, MetaValue][]): GgufMetadata {
  const meta = new GgufMetadata();
  for (const [key, v] of entries) {
    switch (v.type) {
      case 'str':
        meta.set(key, { type: 'string', value: v.value });
        break;
      case 'str[]':
        meta.set(key, { type: 'array', itemType: 'string', value: [...v.value] });
        break;
      case 'i32[]':
        meta.set(key, { type: 'array', itemType: 'i32', value: Int32Array.from(v.value) });
        break;
      case 'f32[]':
        meta.set(key, { type: 'array', itemType: 'f32', value: Float32Array.from(v.value) });
        break;
      default:
        meta.set(key, v);
    }
  }
  return meta;
}

const imported = (meta: GgufMetadata) => {
  const files = ggufTokenizerFiles(meta, 32_768);
  return { files, tok: TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig) };
};

const dir = mkdtempSync(join(tmpdir(), 'real-gguf-tok-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the converter-style metadata', () => {
  it("rebuilds Gemma 3's SentencePiece scores: transformers' merge rule on them gives tokenizer.json's merges", () => {
    const { pieces, scores } = sentencePieceFromTokenizerJson(input('gemma3'));
    const merges = generateMerges(pieces, scores);
    const published = (readRealTokenizer('gemma3').tokenizerJson.model as { merges: [string, string][] }).merges;
    expect(merges.length).toBe(514_906);
    expect(merges).toEqual(published);
  });

  it('Qwen3: gpt2, pre qwen2, padded to vocab_size, added tokens CONTROL or USER_DEFINED', () => {
    const meta = asMetadata(metaOf('qwen3'));
    expect(meta.str('tokenizer.ggml.model')).toBe('gpt2');
    expect(meta.str('tokenizer.ggml.pre')).toBe('qwen2');
    const tokens = meta.strings('tokenizer.ggml.tokens');
    const types = meta.numbers('tokenizer.ggml.token_type');
    expect(tokens.length).toBe(151_936);
    expect([tokens[151_669], types[151_669]]).toEqual(['[PAD151669]', TOKEN_TYPE.UNUSED]);
    const type = (text: string) => types[tokens.indexOf(text)];
    expect(type('<|im_end|>')).toBe(TOKEN_TYPE.CONTROL);
    expect(type('<|fim_prefix|>')).toBe(TOKEN_TYPE.CONTROL); // not special in tokenizer.json, but looks it
    expect(type('<think>')).toBe(TOKEN_TYPE.USER_DEFINED);
    expect(type('Ġthe')).toBe(TOKEN_TYPE.NORMAL);
    expect(meta.strings('tokenizer.ggml.merges')[0]).toBe('Ġ Ġ');
    expect(meta.u32('tokenizer.ggml.eos_token_id')).toBe(151_645);
    expect(meta.u32('tokenizer.ggml.padding_token_id')).toBe(151_643);
    expect(meta.u32('tokenizer.ggml.bos_token_id')).toBe(151_643); // config.json's: tokenizer_config has none
    expect(meta.bool('tokenizer.ggml.add_bos_token')).toBe(false);
  });

  it('Gemma 3: llama, scores and types, user-defined pieces spelled with spaces at -1000', () => {
    const meta = asMetadata(metaOf('gemma3'));
    expect(meta.str('tokenizer.ggml.model')).toBe('llama');
    const tokens = meta.strings('tokenizer.ggml.tokens');
    const types = meta.numbers('tokenizer.ggml.token_type');
    const scores = meta.numbers('tokenizer.ggml.scores');
    expect(tokens.length).toBe(262_144); // <image_soft_token> (262144) is past vocab_size
    expect([tokens[138], types[138], scores[138]]).toEqual(['  ', TOKEN_TYPE.USER_DEFINED, -1000]);
    expect([tokens[106], types[106]]).toEqual(['<end_of_turn>', TOKEN_TYPE.CONTROL]);
    expect(types[tokens.indexOf('<unused0>')]).toBe(TOKEN_TYPE.CONTROL);
    expect(types[tokens.indexOf('<0x0A>')]).toBe(TOKEN_TYPE.BYTE);
    expect([tokens[494], scores[494], scores[495]]).toEqual(['▁t', 0, -1]);
    expect(meta.u32('tokenizer.ggml.bos_token_id')).toBe(2);
    expect(meta.u32('tokenizer.ggml.eos_token_id')).toBe(106);
    expect(meta.bool('tokenizer.ggml.add_bos_token')).toBe(true);
    expect(meta.bool('tokenizer.ggml.add_space_prefix')).toBe(false);
    expect(meta.str('tokenizer.chat_template')).toContain('<start_of_turn>');
  });

  it('a byte-level BPE whose pre-tokenizer llama.cpp has no name for here is refused', () => {
    const qwen = input('qwen3');
    const pre = qwen.tokenizerJson.pre_tokenizer as { pretokenizers: { pattern: { Regex: string } }[] };
    pre.pretokenizers[0].pattern.Regex = pre.pretokenizers[0].pattern.Regex.replace('\\p{N}', '\\p{N}{1,3}');
    expect(() => hfTokenizerMeta(qwen)).toThrow(/is none that llama.cpp names here/);
    const withoutNfc = input('qwen3');
    withoutNfc.tokenizerJson.normalizer = null; // llama.cpp's qwen2 splits as Qwen's does only after NFC
    expect(() => hfTokenizerMeta(withoutNfc)).toThrow(/is none that llama.cpp names here/);
  });
});

describe.each(['qwen3', 'gemma3'] as const)('%s: imported from GGUF metadata', (name) => {
  const real = () => {
    const { tokenizerJson, tokenizerConfig } = readRealTokenizer(name);
    return TextTokenizer.fromJson(tokenizerJson, tokenizerConfig);
  };

  it('encodes the mixed corpus exactly as the published tokenizer.json, and decodes alike', () => {
    const ours = real();
    const { tok, files } = imported(asMetadata(metaOf(name)));
    for (const text of MIXED_CORPUS) {
      const ids = ours.encode(text);
      expect(tok.encode(text), JSON.stringify(text.slice(0, 60))).toEqual(ids);
      expect(tok.encodePrompt(text)).toEqual(ours.encodePrompt(text));
      if (ids.length > 0) expect(tok.decode(ids)).toBe(ours.decode(ids));
    }
    expect(tok.eosTokenIds).toEqual(ours.eosTokenIds);
    expect(files.eosTokenIds).toEqual(ours.eosTokenIds);
    expect(files.tokenizerConfig.chat_template).toBe(readRealTokenizer(name).tokenizerConfig.chat_template);
  });

  if (name === 'gemma3')
    it("makes tokenizer.json's merges, all of them in order", () => {
      const { files } = imported(asMetadata(metaOf(name)));
      const published = readRealTokenizer(name).tokenizerJson.model as { merges: unknown[] };
      expect((files.tokenizerJson.model as { merges: unknown[] }).merges).toEqual(published.merges);
    });
});

describe('through a GGUF file', () => {
  it('Qwen3: the file read back imports to the same tokenizer', async () => {
    const path = join(dir, 'qwen3.gguf');
    writeGguf(path, metaOf('qwen3'), []);
    const { tok } = imported((await readGgufFileHeader(path)).metadata);
    const { tok: direct } = imported(asMetadata(metaOf('qwen3')));
    for (const text of MIXED_CORPUS.slice(0, 30)) expect(tok.encode(text)).toEqual(direct.encode(text));
  });

  // A TextDecoder drops a leading U+FEFF unless told not to: Gemma 3's "\uFEFF//" (id 135260) would read as
  // "//" (id 715) and the import refuse the vocabulary (a piece listed twice).
  it('Gemma 3: a token text that begins with U+FEFF reads back whole', async () => {
    const path = join(dir, 'gemma3.gguf');
    writeGguf(path, metaOf('gemma3'), []);
    const meta = (await readGgufFileHeader(path)).metadata;
    expect(meta.strings('tokenizer.ggml.tokens')[135_260]).toBe('\uFEFF//');
  });
});

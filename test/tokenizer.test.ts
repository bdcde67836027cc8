import { describe, expect, it } from 'vitest';
import { buildTokenizerFiles, readCorpus, SPECIAL_TOKENS } from '../scripts/tokenizer/build-tokenizer.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { BYTE_TO_CHAR, bytesToByteLevel, gpt2PreTokenize } from '../src/tokenizer/byte-level.js';

const files512 = buildTokenizerFiles({ vocabSize: 512 });
const tok512 = TextTokenizer.fromJson(files512.tokenizerJson, files512.tokenizerConfig);

interface BpeJson {
  model: { vocab: Record<string, number>; merges: string[] };
  added_tokens: { id: number; content: string; special: boolean }[];
}
const json512 = files512.tokenizerJson as BpeJson;

/** What the shape test reads of tokenizer.json and tokenizer_config.json beyond the BPE model itself. */
interface HfTokenizerJson extends BpeJson {
  version: string;
  normalizer: unknown;
  pre_tokenizer: unknown;
  decoder: { type: string };
  post_processor: { type: string };
  model: BpeJson['model'] & { type: string; byte_fallback: boolean };
}
interface HfTokenizerConfig {
  chat_template: unknown;
  added_tokens_decoder: Record<string, unknown>;
}
const filesBig = buildTokenizerFiles({ vocabSize: 49152 });
const tokBig = TextTokenizer.fromJson(filesBig.tokenizerJson, filesBig.tokenizerConfig);

const SAMPLES = [
  'Hello, world! The quick brown fox jumps over the lazy dog.',
  "It's 14:35 and the train costs $12.50 (8.25% tax). Don't run!",
  'Français : « Ça va ? » — très bien, merci. Straße, Übermorgen, niño, Łódź, ďábelské.',
  'Ελληνικά: Καλημέρα! Русский: Доброе утро. 中文：今天天气很好。日本語：ありがとう。한국어: 감사합니다.',
  'Emoji 😀🤖👩‍💻🇯🇵 and symbols ∑ ∞ ≈ → ✓ � \u{1F9EC}',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: deliberate: source code holding a template literal
  'function f(x: number): string {\n\treturn `${x * 2}`;\n}\n\n\n   indented   spaces  ',
  '\uFEFFleading BOM, NUL \u0000 and control \u0007 chars, CRLF\r\nend',
  '',
  ' ',
  '🦄',
];

/** Straightforward GPT-2 BPE (min-rank pair, merge all its occurrences, repeat) over the JSON's own merges. */
function referenceEncode(json: BpeJson, text: string): number[] {
  const ranks = new Map(json.model.merges.map((m, i) => [m, i]));
  const vocab = json.model.vocab;
  const specials = json.added_tokens.map((t) => t.content);
  const ids: number[] = [];
  let rest = text;
  while (rest.length > 0) {
    // Earliest special token occurrence (longest at equal position) splits the text, as added tokens do.
    let at = -1;
    let found = '';
    for (const s of specials) {
      const i = rest.indexOf(s);
      if (i >= 0 && (at < 0 || i < at || (i === at && s.length > found.length))) [at, found] = [i, s];
    }
    const plain = at < 0 ? rest : rest.slice(0, at);
    for (const piece of gpt2PreTokenize(plain)) {
      let word = Array.from(bytesToByteLevel(new TextEncoder().encode(piece)));
      for (;;) {
        let best = -1;
        let bestRank = Infinity;
        for (let i = 0; i + 1 < word.length; i++) {
          const r = ranks.get(`${word[i]} ${word[i + 1]}`);
          if (r !== undefined && r < bestRank) [best, bestRank] = [i, r];
        }
        if (best < 0) break;
        const [a, b] = [word[best], word[best + 1]];
        const next: string[] = [];
        for (let i = 0; i < word.length; i++) {
          if (i + 1 < word.length && word[i] === a && word[i + 1] === b) {
            next.push(a + b);
            i++;
          } else next.push(word[i]);
        }
        word = next;
      }
      for (const t of word) ids.push(vocab[t]);
    }
    if (at < 0) break;
    ids.push(vocab[found]);
    rest = rest.slice(at + found.length);
  }
  return ids;
}

describe('buildTokenizerFiles', () => {
  it('is deterministic (byte-identical JSON)', () => {
    const again = buildTokenizerFiles({ vocabSize: 512 });
    expect(JSON.stringify(again)).toBe(JSON.stringify(files512));
    expect(JSON.stringify(buildTokenizerFiles({ vocabSize: 49152 }))).toBe(JSON.stringify(filesBig));
  });

  it('lays out specials, bytes, then merges', () => {
    const vocab = json512.model.vocab;
    expect(Object.keys(vocab)).toHaveLength(512);
    for (const [id, s] of SPECIAL_TOKENS.entries()) expect(vocab[s]).toBe(id);
    for (const [b, ch] of BYTE_TO_CHAR.entries()) expect(vocab[ch]).toBe(3 + b);
    expect(json512.model.merges).toHaveLength(512 - 3 - 256);
    expect(new Set(Object.values(vocab)).size).toBe(512);
    expect(Math.max(...Object.values(vocab))).toBe(511);
  });

  it('caps a large vocab at what the corpus supports, fast', () => {
    const t0 = performance.now();
    const files = buildTokenizerFiles({ vocabSize: 49152 });
    const ms = performance.now() - t0;
    const size = Object.keys((files.tokenizerJson as BpeJson).model.vocab).length;
    expect(size).toBeGreaterThan(3000);
    expect(size).toBeLessThanOrEqual(49152);
    expect(ms).toBeLessThan(5000);
    // The corpus is exhausted: every pre-token of it is a single token.
    const tok = TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig);
    expect(tok.encode(' lighthouse')).toHaveLength(1);
  });

  it('rejects a vocab too small for the byte alphabet', () => {
    expect(() => buildTokenizerFiles({ vocabSize: 100 })).toThrow(/vocabSize/);
  });

  it('has the Hugging Face tokenizer.json shape transformers.js reads', () => {
    const j = files512.tokenizerJson as HfTokenizerJson;
    expect(j.version).toBe('1.0');
    expect(j.normalizer).toBeNull();
    expect(j.pre_tokenizer).toEqual({
      type: 'ByteLevel',
      add_prefix_space: false,
      trim_offsets: true,
      use_regex: true,
    });
    expect(j.decoder.type).toBe('ByteLevel');
    expect(j.post_processor.type).toBe('ByteLevel');
    expect(j.model.type).toBe('BPE');
    expect(j.model.byte_fallback).toBe(false);
    for (const t of j.added_tokens) {
      expect(Object.keys(t).sort()).toEqual([
        'content',
        'id',
        'lstrip',
        'normalized',
        'rstrip',
        'single_word',
        'special',
      ]);
      expect(t.special).toBe(true);
    }
    // Each merge is "left right" with exactly one space, both sides and the result in the vocab.
    for (const m of j.model.merges) {
      const parts = m.split(' ');
      expect(parts).toHaveLength(2);
      expect(j.model.vocab[parts[0]]).toBeTypeOf('number');
      expect(j.model.vocab[parts[1]]).toBeTypeOf('number');
      expect(j.model.vocab[parts[0] + parts[1]]).toBeTypeOf('number');
    }
    const c = files512.tokenizerConfig as HfTokenizerConfig;
    expect(c).toMatchObject({
      add_bos_token: false,
      add_eos_token: false,
      bos_token: '<|im_start|>',
      eos_token: '<|im_end|>',
      pad_token: '<|endoftext|>',
      clean_up_tokenization_spaces: false,
      tokenizer_class: 'GPT2Tokenizer',
      model_max_length: 2048,
    });
    expect(typeof c.chat_template).toBe('string');
    expect(c.added_tokens_decoder['2']).toEqual({
      content: '<|im_end|>',
      lstrip: false,
      normalized: false,
      rstrip: false,
      single_word: false,
      special: true,
    });
    // Survives a JSON round trip unchanged (no undefined, no non-JSON values).
    expect(JSON.parse(JSON.stringify(files512))).toEqual(files512);
  });
});

describe('TextTokenizer', () => {
  it('knows its ids', () => {
    expect(tok512.vocabSize).toBe(512);
    expect([...tok512.specialTokenIds].sort()).toEqual([0, 1, 2]);
    expect(tok512.bosTokenId).toBe(1);
    expect(tok512.eosTokenId).toBe(2);
    expect(tok512.padTokenId).toBe(0);
    expect(tok512.eosTokenIds).toEqual([2, 0]);
  });

  it('round-trips varied text', () => {
    for (const s of SAMPLES) expect(tok512.decode(tok512.encode(s))).toBe(s);
    // A byte-level tokenizer's post-processor adds nothing around a raw prompt (as SmolLM2's).
    for (const s of SAMPLES) expect(tok512.encodePrompt(s)).toEqual(tok512.encode(s));
    expect(tok512.encode('')).toEqual([]);
    expect(tok512.decode([])).toBe('');
  });

  it('uses its merges: corpus-like text takes far fewer tokens than bytes', () => {
    const text = readCorpus().slice(0, 4000);
    const bytes = new TextEncoder().encode(text).length;
    expect(tok512.encode(text).length).toBeLessThan(0.6 * bytes);
    expect(tokBig.encode(text).length).toBeLessThan(0.3 * bytes);
  });

  it('matches a straightforward BPE over the same merges', () => {
    const texts = [...SAMPLES, readCorpus().slice(1000, 3000), 'unseen wordsmithery: thermodynamically überraschend'];
    for (const s of texts) {
      expect(tok512.encode(s)).toEqual(referenceEncode(json512, s));
      expect(tokBig.encode(s)).toEqual(referenceEncode(filesBig.tokenizerJson as BpeJson, s));
    }
  });

  it('recognises special-token strings inside text', () => {
    const ids = tok512.encode('<|im_start|>user\nHi<|im_end|>\n<|endoftext|>');
    expect(ids[0]).toBe(1);
    expect(ids).toContain(2);
    expect(ids.at(-1)).toBe(0);
    expect(ids.filter((id) => id < 3)).toEqual([1, 2, 0]);
    expect(tok512.decode(ids)).toBe('<|im_start|>user\nHi<|im_end|>\n<|endoftext|>');
    expect(tok512.decode(ids, { skipSpecialTokens: true })).toBe('user\nHi\n');
    // A near miss is ordinary text.
    expect(tok512.encode('<|im_sta').every((id) => id >= 3)).toBe(true);
  });

  it('gives the raw bytes of each token', () => {
    const text = 'naïve 日本 😀';
    const ids = tok512.encode(text);
    const bytes = ids.flatMap((id) => [...tok512.tokenBytes(id)]);
    expect(new Uint8Array(bytes)).toEqual(new TextEncoder().encode(text));
    expect(tok512.tokenBytes(2)).toEqual(new Uint8Array(0));
    expect(new TextDecoder().decode(tok512.tokenBytes(2, { addedTokens: 'text' }))).toBe('<|im_end|>');
    expect(tok512.tokenBytes(3 + 0x20)).toEqual(new Uint8Array([0x20]));
    // Some multi-byte character is split across tokens at this vocab size.
    expect(ids.some((id) => id >= 3 && (tok512.tokenBytes(id)[0] & 0xc0) === 0x80)).toBe(true);
  });

  it("every id's bytes are its byte-level spelling's, whichever is asked first; a bad token fails alone", () => {
    // The bytes of all ids are packed into one buffer on first use: asking for the last id first must
    // still give each id its own bytes.
    const fresh = TextTokenizer.fromJson(filesBig.tokenizerJson, filesBig.tokenizerConfig);
    const last = fresh.vocabSize - 1;
    expect(bytesToByteLevel(fresh.tokenBytes(last))).toBe(fresh.idToToken(last));
    for (let id = 3; id < fresh.vocabSize; id++) {
      if (bytesToByteLevel(fresh.tokenBytes(id)) !== fresh.idToToken(id)) throw new Error(`id ${id} has other bytes`);
    }
    // A vocabulary entry that is not byte-level throws for its own id only, every time it is asked for.
    const json = structuredClone(json512) as BpeJson;
    json.model.vocab['not\u{1F600}level'] = 512;
    const odd = TextTokenizer.fromJson(json, files512.tokenizerConfig);
    expect(odd.tokenBytes(3 + 0x41)).toEqual(new Uint8Array([0x41]));
    expect(() => odd.tokenBytes(512)).toThrow(/not a byte-level string/);
    expect(() => odd.tokenBytes(512)).toThrow(/not a byte-level string/);
    expect(odd.tokenBytes(511)).toEqual(tok512.tokenBytes(511));
  });

  it('rejects ids outside the vocabulary', () => {
    expect(() => tok512.decode([5, 512])).toThrow(RangeError);
    expect(() => tok512.tokenBytes(-1)).toThrow(RangeError);
    expect(() => tok512.decode([1.5])).toThrow(RangeError);
  });
});

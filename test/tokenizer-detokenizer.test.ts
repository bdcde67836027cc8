import { describe, expect, it } from 'vitest';
import { buildTokenizerFiles } from '../scripts/tokenizer/build-tokenizer.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { IncrementalDetokenizer } from '../src/tokenizer/incremental-detokenizer.js';
import { mulberry32 } from './helpers/prng.js';

const files = buildTokenizerFiles({ vocabSize: 512 });
const tok = TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig);
const FFFD = '\uFFFD';

function stream(ids: number[], skipSpecialTokens: boolean): string[] {
  const detok = new IncrementalDetokenizer(tok, { skipSpecialTokens });
  return [...ids.map((id) => detok.push(id)), detok.flush()];
}

const FRAGMENTS = [
  'hello',
  ' world',
  'é',
  'ñ',
  'ü',
  'ß',
  '日本語',
  '中文',
  '한국어',
  'Ελληνικά',
  'Привет',
  '😀',
  '🤖',
  '👩‍💻',
  '🇯🇵',
  ' ',
  '\n',
  '12.5',
  '∑∞',
  '«»',
  '<|im_end|>',
  '<|im_start|>',
  '<|endoftext|>',
  '\uFEFF',
  '𝔘𝔫𝔦',
];

function randomText(next: () => number): string {
  let s = '';
  const n = 1 + Math.floor(next() * 12);
  for (let i = 0; i < n; i++) s += FRAGMENTS[Math.floor(next() * FRAGMENTS.length)];
  return s;
}

describe('IncrementalDetokenizer', () => {
  it('holds back a character split across tokens until it is complete', () => {
    const ids = tok.encode('😀');
    expect(ids.length).toBeGreaterThan(1); // four bytes, not merged at this vocab size
    const pieces = stream(ids, true);
    expect(pieces.slice(0, -2).every((p) => p === '')).toBe(true);
    expect(pieces.at(-2)).toBe('😀');
    expect(pieces.at(-1)).toBe('');
  });

  it('emits U+FFFD only at flush for a truncated character', () => {
    const ids = tok.encode('a😀').slice(0, -1);
    const pieces = stream(ids, true);
    expect(pieces.slice(0, -1).join('')).toBe('a');
    expect(pieces.at(-1)).toBe(FFFD);
    expect(pieces.join('')).toBe(tok.decode(ids));
  });

  it('equals decode() on encoded text, never showing U+FFFD mid-stream', () => {
    for (let seed = 1; seed <= 200; seed++) {
      const next = mulberry32(seed);
      const text = randomText(next);
      const ids = tok.encode(text);
      for (const skip of [true, false]) {
        const pieces = stream(ids, skip);
        const full = tok.decode(ids, { skipSpecialTokens: skip });
        expect(pieces.join(''), `seed ${seed} skip ${skip}`).toBe(full);
        expect(
          pieces.some((p) => p.includes(FFFD)),
          `seed ${seed}`,
        ).toBe(false);
      }
      expect(stream(ids, false).join('')).toBe(text);
    }
  });

  it('equals decode() on arbitrary id sequences, including invalid UTF-8', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const next = mulberry32(seed);
      const len = Math.floor(next() * 40);
      const ids: number[] = [];
      for (let i = 0; i < len; i++) {
        const r = next();
        // Bias toward specials and high bytes (lead/continuation bytes) to hit the awkward cases often.
        if (r < 0.1) ids.push(Math.floor(next() * 3));
        else if (r < 0.5) ids.push(3 + 0x80 + Math.floor(next() * 128));
        else ids.push(Math.floor(next() * tok.vocabSize));
      }
      for (const skip of [true, false]) {
        const pieces = stream(ids, skip);
        const full = tok.decode(ids, { skipSpecialTokens: skip });
        expect(pieces.join(''), `seed ${seed} skip ${skip} ids ${ids}`).toBe(full);
        if (!full.includes(FFFD)) expect(pieces.some((p) => p.includes(FFFD))).toBe(false);
      }
    }
  });

  it('joins bytes across a skipped special token and splits them at a kept one, like decode()', () => {
    const [e1, e2] = [0xc3, 0xa9].map((b) => 3 + b); // é as two byte tokens
    const ids = [e1, 2, e2];
    expect(stream(ids, true).join('')).toBe('é');
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('é');
    expect(stream(ids, false).join('')).toBe(tok.decode(ids));
    expect(tok.decode(ids)).toBe(`${FFFD}<|im_end|>${FFFD}`);
  });

  it('keeps a leading BOM as decode() does', () => {
    const ids = tok.encode('\uFEFFhi');
    expect(stream(ids, true).join('')).toBe('\uFEFFhi');
  });
});

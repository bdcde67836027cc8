// TextTokenizer holds its BPE model's token index and merge ranks in typed arrays (vocab-index.ts,
// merge-ranks.ts) instead of @huggingface/tokenizers' Maps: it must encode exactly as the library does on the
// same tokenizer.json, including the corners the Maps decide (a merge listed twice keeps its last rank; a merge
// whose half is no token keeps the Map), and the Maps must really be gone. The real vocabularies are compared
// in real-tokenizers.test.ts; the memory they save is measured by scripts/tokenizer/tokenizer-memory.ts.
import { Tokenizer } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { buildTokenizerFiles } from '../scripts/tokenizer/build-tokenizer.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { VocabIndex } from '../src/tokenizer/vocab-index.js';
import { MIXED_CORPUS } from './helpers/mixed-corpus.js';

interface Files {
  tokenizerJson: { model: { merges: string[]; vocab: Record<string, number> } };
  tokenizerConfig: Record<string, unknown>;
}
const files = (): Files => buildTokenizerFiles({ vocabSize: 1024 }) as unknown as Files;

function both(edit: (f: Files) => void): { ours: TextTokenizer; hf: Tokenizer } {
  const a = files();
  const b = files();
  edit(a);
  edit(b);
  return {
    ours: TextTokenizer.fromJson(a.tokenizerJson, a.tokenizerConfig),
    hf: new Tokenizer(b.tokenizerJson, b.tokenizerConfig),
  };
}

const model = (tok: TextTokenizer) =>
  (tok as unknown as { hf: { model: { bpe_ranks: Map<string, number>; tokens_to_ids: unknown } } }).hf.model;

function expectSameEncoding(ours: TextTokenizer, hf: Tokenizer): void {
  for (const text of MIXED_CORPUS)
    expect(ours.encode(text)).toEqual(hf.encode(text, { add_special_tokens: false }).ids);
}

describe('compact BPE tables', () => {
  it('replace the Maps and encode as the library does', () => {
    const { ours, hf } = both(() => {});
    expect(model(ours).bpe_ranks.size).toBe(0);
    expect(model(ours).tokens_to_ids).toBeInstanceOf(VocabIndex);
    expectSameEncoding(ours, hf);
    expect(ours.tokenToId('<|im_end|>')).toBe(hf.token_to_id('<|im_end|>'));
    expect(ours.tokenToId('no such token')).toBeUndefined();
  });

  it('a merge listed twice ranks where it is listed last, as the Map has it', () => {
    // The first merge repeated at the end: the library's Map ranks it last, which changes what BPE makes.
    const { ours, hf } = both((f) => f.tokenizerJson.model.merges.push(f.tokenizerJson.model.merges[0]));
    const plain = both(() => {});
    const ids = (tok: Tokenizer, text: string) => JSON.stringify(tok.encode(text, { add_special_tokens: false }).ids);
    expect(MIXED_CORPUS.some((text) => ids(hf, text) !== ids(plain.hf, text))).toBe(true);
    expect(model(ours).bpe_ranks.size).toBe(0);
    expectSameEncoding(ours, hf);
  });

  it('a merge with a half outside the vocabulary keeps the library Map', () => {
    const { ours, hf } = both((f) => f.tokenizerJson.model.merges.unshift('☃ x'));
    expect(model(ours).bpe_ranks.size).toBeGreaterThan(0);
    expectSameEncoding(ours, hf);
  });

  it('VocabIndex answers get and has as a Map of the same entries', () => {
    const entries: [string, number][] = [...Array(5000).keys()].map((i) => [`t${i.toString(36)}`, i]);
    entries.push(['t0', 99_999], ['', 7], ['constructor', 8]); // a repeated key keeps the last value, as Map
    const map = new Map(entries);
    const index = new VocabIndex(entries, entries.length);
    expect(index.size).toBe(map.size);
    for (const key of [...map.keys(), 'absent', 'toString', 't']) {
      expect(index.get(key)).toBe(map.get(key));
      expect(index.has(key)).toBe(map.has(key));
    }
  });
});

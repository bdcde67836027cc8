// The corpus builder of wordnet-chat on a hand-made WordNet (CI has no wordnet-base): glosses split into a
// definition and examples, conversations deterministic for a seed, a word's conversations in one split, the
// JSON records and tool calls well-formed; and the dictionary-word count behind the English measurement.
import { describe, expect, it } from 'vitest';
import { buildConversations, jsonRecord, TEST_EVERY } from '../scripts/wordnet/chat-corpus.js';
import { countDictionaryWords, isDictionaryWord } from '../scripts/wordnet/english-words.js';
import { splitGloss, type Synset, type WordNet } from '../scripts/wordnet/wordnet-db.js';

function wordnet(): WordNet {
  const synsets: Synset[] = [];
  const senses = new Map<string, string[]>();
  for (let i = 0; i < 400; i++) {
    const id = `noun:${String(i).padStart(8, '0')}`;
    const word = `word${i}`;
    synsets.push({
      id,
      pos: 'noun',
      lemmas: [word, `other${i}`],
      definition: `a thing numbered ${i}`,
      examples: [`the ${word} is here`],
    });
    senses.set(`noun:${word}`, [id]);
  }
  return { synsets: new Map(synsets.map((s) => [s.id, s])), senses, dictionary: new Set() };
}

describe('WordNet glosses', () => {
  it('split into the definition and the quoted examples', () => {
    expect(splitGloss('(usually followed by `to\') having the means; "able to swim"; "she was able"  ')).toEqual({
      definition: "(usually followed by `to') having the means",
      examples: ['able to swim', 'she was able'],
    });
    expect(splitGloss('breathe easily again, as after exertion or anxiety  ')).toEqual({
      definition: 'breathe easily again, as after exertion or anxiety',
      examples: [],
    });
  });
});

describe('chat corpus', () => {
  it('is the same for the same seed and differs for another', () => {
    const a = JSON.stringify(buildConversations(wordnet(), { seed: 22 }));
    expect(JSON.stringify(buildConversations(wordnet(), { seed: 22 }))).toBe(a);
    expect(JSON.stringify(buildConversations(wordnet(), { seed: 23 }))).not.toBe(a);
  });

  it("holds out about 1 word in TEST_EVERY, and all of a word's conversations go to the same split", () => {
    const conversations = buildConversations(wordnet(), { seed: 22 });
    const splitOfWord = new Map<string, string>();
    for (const c of conversations) {
      const user = c.messages.find((m) => m.role === 'user' && /word\d+/.test(m.content));
      const word = user?.content.match(/word\d+/)?.[0];
      if (!word) continue;
      expect(splitOfWord.get(word) ?? c.split).toBe(c.split);
      splitOfWord.set(word, c.split);
    }
    const held = [...splitOfWord.values()].filter((s) => s === 'test').length;
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThan((3 * splitOfWord.size) / TEST_EVERY);
  });

  it('answers definitions from the gloss, and writes JSON records and tool calls that parse', () => {
    const conversations = buildConversations(wordnet(), { seed: 22 });
    const replies = conversations.flatMap((c) => c.messages.filter((m) => m.role === 'assistant'));
    expect(replies.some((m) => /^Word\d+ \(noun\): A thing numbered \d+\./.test(m.content))).toBe(true);
    const records = replies.filter((m) => m.content.startsWith('{')).map((m) => JSON.parse(m.content));
    expect(records.length).toBeGreaterThan(0);
    for (const r of records) expect(Object.keys(r)).toEqual(['word', 'part_of_speech', 'definition']);
    const tools = conversations.filter((c) => c.tools);
    for (const c of tools) {
      const call = c.messages[1] as { tool_calls: { function: { name: string; arguments: string } }[] };
      expect(call.tool_calls[0].function.name).toBe('define_word');
      expect(Object.keys(JSON.parse(call.tool_calls[0].function.arguments))).toEqual(['word']);
    }
    const s = wordnet().synsets.get('noun:00000007')!;
    expect(JSON.parse(jsonRecord('word7', s))).toEqual({
      word: 'word7',
      part_of_speech: 'noun',
      definition: 'a thing numbered 7',
    });
  });
});

describe('dictionary words', () => {
  const dictionary = new Set(['dog', 'goose', 'run', 'happy', 'box', 'make']);
  it('knows inflections the way morphy undoes them', () => {
    for (const w of ['Dogs', 'boxes', 'boxing', 'runs', 'boxer', 'making'])
      expect(isDictionaryWord(w, dictionary), w).toBe(true);
    for (const w of ['dogx', 'xyzzy', 'gooses2']) expect(isDictionaryWord(w, dictionary), w).toBe(false);
  });

  it('counts the alphabetic words of texts and lists the unknown ones', () => {
    expect(countDictionaryWords(['Dogs run, 42 boxes!', 'xyzzy happy'], dictionary)).toEqual({
      words: 5,
      known: 4,
      unknown: ['xyzzy'],
    });
  });
});

// "Is this English?" as a number: the share of a text's alphabetic words that WordNet knows, trying the
// inflections WordNet's own morphy() undoes (plural -s/-es/-ies, -ed, -ing, -er, -est).
const SUFFIXES: [string, string][] = [
  ['s', ''],
  ['ses', 's'],
  ['xes', 'x'],
  ['zes', 'z'],
  ['ches', 'ch'],
  ['shes', 'sh'],
  ['men', 'man'],
  ['ies', 'y'],
  ['es', 'e'],
  ['es', ''],
  ['ed', 'e'],
  ['ed', ''],
  ['ing', 'e'],
  ['ing', ''],
  ['er', ''],
  ['est', ''],
  ['er', 'e'],
  ['est', 'e'],
];

export function isDictionaryWord(word: string, dictionary: ReadonlySet<string>): boolean {
  const w = word.toLowerCase();
  if (dictionary.has(w)) return true;
  return SUFFIXES.some(([from, to]) => w.endsWith(from) && dictionary.has(w.slice(0, -from.length) + to));
}

export interface WordCount {
  words: number;
  known: number;
  unknown: string[];
}

export function countDictionaryWords(texts: readonly string[], dictionary: ReadonlySet<string>): WordCount {
  const out: WordCount = { words: 0, known: 0, unknown: [] };
  for (const text of texts) {
    for (const word of text.match(/[A-Za-z]+/g) ?? []) {
      out.words++;
      if (isDictionaryWord(word, dictionary)) out.known++;
      else out.unknown.push(word);
    }
  }
  return out;
}

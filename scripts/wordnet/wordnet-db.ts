// Reads Princeton WordNet 3.0's database files as Debian's `wordnet-base` installs them
// (/usr/share/wordnet/{data,index}.{noun,verb,adj,adv}; format: wndb(5WN)). Only what the corpus uses:
// each synset's lemmas, definition and example sentences, and each lemma's senses in frequency order.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const WORDNET_DIR = '/usr/share/wordnet';
export const POS_FILES = ['noun', 'verb', 'adj', 'adv'] as const;
export type PosFile = (typeof POS_FILES)[number];

/** The part of speech as a reader says it. */
export const POS_NAME: Record<PosFile, string> = { noun: 'noun', verb: 'verb', adj: 'adjective', adv: 'adverb' };

export interface Synset {
  /** `<pos>:<offset>`: unique across the four files. */
  id: string;
  pos: PosFile;
  /** Lemmas as written ("take a breath"), without WordNet's adjective markers. */
  lemmas: string[];
  definition: string;
  examples: string[];
}

export interface WordNet {
  synsets: Map<string, Synset>;
  /** `<pos>:<lemma>` -> its synsets' ids, most frequent sense first (index file order). */
  senses: Map<string, string[]>;
  /** Every lemma of the index files and the exception lists, lower case: the dictionary. */
  dictionary: Set<string>;
}

export function requireWordNet(dir = WORDNET_DIR): void {
  if (!existsSync(join(dir, 'data.noun')))
    throw new Error(
      `${dir}/data.noun not found: install WordNet's database with \`apt-get install wordnet-base\` (Debian)`,
    );
}

const lemmaText = (raw: string) => raw.replace(/\([a-z]+\)$/, '').replace(/_/g, ' ');

/** Splits a gloss into its definition and its quoted examples ('def; "ex one"; "ex two"'). */
export function splitGloss(gloss: string): { definition: string; examples: string[] } {
  const parts = gloss.trim().split(/;\s*(?=")/);
  const definition = parts[0].replace(/;\s*$/, '').trim();
  const examples = parts
    .slice(1)
    .map((p) => p.trim().replace(/;$/, '').trim())
    .filter((p) => p.startsWith('"') && p.endsWith('"') && p.length > 2)
    .map((p) => p.slice(1, -1).trim());
  return { definition, examples };
}

function parseDataLine(line: string, pos: PosFile): Synset | undefined {
  if (line.startsWith('  ')) return undefined; // the licence header
  const bar = line.indexOf(' | ');
  if (bar < 0) return undefined;
  const fields = line.slice(0, bar).split(' ');
  const wordCount = Number.parseInt(fields[3], 16);
  const lemmas: string[] = [];
  for (let i = 0; i < wordCount; i++) lemmas.push(lemmaText(fields[4 + 2 * i]));
  return { id: `${pos}:${fields[0]}`, pos, lemmas, ...splitGloss(line.slice(bar + 3)) };
}

export function readWordNet(dir = WORDNET_DIR): WordNet {
  requireWordNet(dir);
  const synsets = new Map<string, Synset>();
  const senses = new Map<string, string[]>();
  const dictionary = new Set<string>();
  for (const pos of POS_FILES) {
    for (const line of readFileSync(join(dir, `data.${pos}`), 'latin1').split('\n')) {
      const synset = parseDataLine(line, pos);
      if (synset) synsets.set(synset.id, synset);
    }
    for (const line of readFileSync(join(dir, `index.${pos}`), 'latin1').split('\n')) {
      if (line.startsWith(' ') || line.length === 0) continue;
      const fields = line.trim().split(' ');
      const lemma = lemmaText(fields[0]);
      const offsets = fields.filter((f) => /^\d{8}$/.test(f));
      senses.set(
        `${pos}:${lemma}`,
        offsets.map((o) => `${pos}:${o}`),
      );
      for (const word of lemma.split(/[ -]/)) dictionary.add(word.toLowerCase());
    }
    // Inflected forms ("geese goose"): the dictionary should know "geese" too.
    for (const line of readFileSync(join(dir, `${pos}.exc`), 'latin1').split('\n')) {
      for (const form of line.trim().split(' '))
        if (form) for (const w of lemmaText(form).split(/[ -]/)) dictionary.add(w.toLowerCase());
    }
  }
  return { synsets, senses, dictionary };
}

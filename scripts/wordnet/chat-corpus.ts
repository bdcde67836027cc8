// Turns WordNet into chat conversations (OpenAI message arrays) for training a small chat model:
// definitions, example sentences, synonyms, parts of speech, JSON records and tool calls, with a few
// greetings and system prompts so the playground's and README's first messages are in distribution.
// Deterministic: a seeded PRNG and WordNet's own order; held-out conversations chosen by a hash of the word.
import { mulberry32 } from '../lib/mulberry32.js';
import { POS_FILES, POS_NAME, type PosFile, type Synset, type WordNet } from './wordnet-db.js';

export interface ToolCallMessage {
  role: 'assistant';
  content: string;
  tool_calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
}
export type ChatMessage =
  | { role: 'system' | 'user' | 'assistant'; content: string }
  | { role: 'tool'; tool_call_id: string; content: string }
  | ToolCallMessage;

export interface Conversation {
  messages: ChatMessage[];
  /** Present when the conversation declares tools (rendered by the chat template). */
  tools?: unknown[];
  split: 'train' | 'test';
}

/** The tool the tool-call conversations use; docs and the structured-output measurement use it too. */
export const DEFINE_TOOL = {
  type: 'function',
  function: {
    name: 'define_word',
    description: 'Look up the definition of an English word.',
    parameters: {
      type: 'object',
      properties: { word: { type: 'string', description: 'The word to define.' } },
      required: ['word'],
    },
  },
};

/** FNV-1a: which split a word belongs to must not depend on anything but the word. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** One word in this many goes to the held-out split. */
export const TEST_EVERY = 50;
const splitOf = (lemma: string): 'train' | 'test' => (fnv1a(lemma.toLowerCase()) % TEST_EVERY === 0 ? 'test' : 'train');

export const SYSTEM_PROMPTS = [
  'You are a helpful assistant.',
  'You are terse.',
  'You are a dictionary. Answer briefly.',
  'You explain English words.',
  'You are a friendly assistant who knows many words.',
];
const GREETINGS = ['Hi', 'Hi!', 'Hello', 'Hello!', 'Hey', 'Hey there!', 'Good morning!', 'Good evening.', 'Hi there'];
export const GREETING_REPLIES = [
  'Hello! Ask me what a word means, or ask me to use a word in a sentence.',
  'Hi! I know the meanings of many English words. Which word would you like to know about?',
  'Hello! Name a word and I will tell you what it means.',
  'Hi there! Ask me about any English word.',
];
const THANKS = ['Thanks!', 'Thank you.', 'Thank you!', 'Great, thanks.'];
const THANKS_REPLIES = ['You are welcome!', 'Glad to help. Ask me about another word.', 'You are welcome.'];

const MEANING_QUESTIONS = [
  (w: string) => `What does ${w} mean?`,
  (w: string) => `What does "${w}" mean?`,
  (w: string) => `Define ${w}.`,
  (w: string) => `What is the meaning of ${w}?`,
  (w: string) => `What is the definition of "${w}"?`,
  (w: string) => `Explain the word ${w}.`,
  (w: string) => `${w}?`,
];
const MORE_QUESTIONS = ['What else can it mean?', 'Does it have another meaning?', 'And another meaning?'];
const SENTENCE_QUESTIONS = [
  (w: string) => `Use ${w} in a sentence.`,
  (w: string) => `Use "${w}" in a sentence.`,
  (w: string) => `Give me an example with the word ${w}.`,
  (w: string) => `How do you use ${w}?`,
];
const SYNONYM_QUESTIONS = [
  (w: string) => `What is another word for ${w}?`,
  (w: string) => `Give me a synonym for ${w}.`,
  (w: string) => `What are synonyms of "${w}"?`,
];
const POS_QUESTIONS = [(w: string) => `What part of speech is ${w}?`, (w: string) => `Is ${w} a noun or a verb?`];
const JSON_QUESTIONS = [
  (w: string) => `Describe ${w} as JSON.`,
  (w: string) => `Give me a JSON record for the word "${w}".`,
  (w: string) => `Define ${w} in JSON with word, part_of_speech and definition.`,
];

const capitalise = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);
const sentence = (s: string) => (/[.!?]$/.test(s) ? capitalise(s) : `${capitalise(s)}.`);
const joinOr = (items: string[], word: string) =>
  items.length <= 1 ? items.join('') : `${items.slice(0, -1).join(', ')} ${word} ${items[items.length - 1]}`;

function definitionReply(lemma: string, s: Synset, withExample: boolean): string {
  const text = `${capitalise(lemma)} (${POS_NAME[s.pos]}): ${sentence(s.definition)}`;
  const example = s.examples.find((e) => mentions(e, lemma));
  return withExample && example ? `${text} For example: "${example}".` : text;
}

/** Whether an example sentence uses the lemma (or an inflection sharing its first letters). */
function mentions(example: string, lemma: string): boolean {
  const stem = lemma.toLowerCase().slice(0, Math.max(3, lemma.length - 2));
  return example.toLowerCase().includes(stem);
}

export function jsonRecord(lemma: string, s: Synset): string {
  return JSON.stringify({ word: lemma, part_of_speech: POS_NAME[s.pos], definition: s.definition });
}

export interface CorpusOptions {
  seed: number;
}

/** Every conversation, in a seeded shuffled order. */
export function buildConversations(wn: WordNet, { seed }: CorpusOptions): Conversation[] {
  const random = mulberry32(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
  const out: Conversation[] = [];
  const posOfLemma = new Map<string, PosFile[]>();
  for (const key of wn.senses.keys()) {
    const [pos, lemma] = [key.slice(0, key.indexOf(':')) as PosFile, key.slice(key.indexOf(':') + 1)];
    posOfLemma.set(lemma, [...(posOfLemma.get(lemma) ?? []), pos]);
  }
  const maybeSystem = (): ChatMessage[] => (random() < 0.2 ? [{ role: 'system', content: pick(SYSTEM_PROMPTS) }] : []);

  for (const pos of POS_FILES) {
    for (const [key, ids] of wn.senses) {
      if (!key.startsWith(`${pos}:`)) continue;
      const lemma = key.slice(pos.length + 1);
      const split = splitOf(lemma);
      const synsets = ids.map((id) => wn.synsets.get(id)).filter((s): s is Synset => s !== undefined);
      if (synsets.length === 0) continue;
      const first = synsets[0];

      // Meaning, with follow-ups for further senses.
      const messages: ChatMessage[] = [...maybeSystem()];
      if (random() < 0.05)
        messages.push(
          { role: 'user', content: pick(GREETINGS) },
          { role: 'assistant', content: pick(GREETING_REPLIES) },
        );
      messages.push({ role: 'user', content: pick(MEANING_QUESTIONS)(lemma) });
      messages.push({ role: 'assistant', content: definitionReply(lemma, first, random() < 0.5) });
      for (const s of synsets.slice(1, 4)) {
        if (random() < 0.5) break;
        messages.push({ role: 'user', content: pick(MORE_QUESTIONS) });
        messages.push({ role: 'assistant', content: definitionReply(lemma, s, random() < 0.5) });
      }
      if (random() < 0.05)
        messages.push({ role: 'user', content: pick(THANKS) }, { role: 'assistant', content: pick(THANKS_REPLIES) });
      out.push({ messages, split });

      // An example sentence that uses the word.
      const withExample = synsets.find((s) => s.examples.some((e) => mentions(e, lemma)));
      if (withExample && random() < 0.6) {
        const example = withExample.examples.find((e) => mentions(e, lemma)) ?? '';
        out.push({
          messages: [
            ...maybeSystem(),
            { role: 'user', content: pick(SENTENCE_QUESTIONS)(lemma) },
            { role: 'assistant', content: sentence(example) },
          ],
          split,
        });
      }

      // Synonyms from the first sense that has any.
      const withSynonyms = synsets.find((s) => s.lemmas.some((l) => l.toLowerCase() !== lemma.toLowerCase()));
      if (withSynonyms && random() < 0.35) {
        const others = withSynonyms.lemmas.filter((l) => l.toLowerCase() !== lemma.toLowerCase()).slice(0, 4);
        out.push({
          messages: [
            ...maybeSystem(),
            { role: 'user', content: pick(SYNONYM_QUESTIONS)(lemma) },
            {
              role: 'assistant',
              content: `${capitalise(lemma)} can also be called ${joinOr(others, 'or')}, in the sense: ${withSynonyms.definition}.`,
            },
          ],
          split,
        });
      }

      // Parts of speech: once per lemma, from its first part of speech.
      const parts = posOfLemma.get(lemma) ?? [pos];
      if (parts[0] === pos && random() < 0.15) {
        const names = parts.map((p) => `${p === 'adj' || p === 'adv' ? 'an' : 'a'} ${POS_NAME[p]}`);
        out.push({
          messages: [
            ...maybeSystem(),
            { role: 'user', content: pick(POS_QUESTIONS)(lemma) },
            { role: 'assistant', content: `${capitalise(lemma)} can be ${joinOr(names, 'or')}.` },
          ],
          split,
        });
      }

      // A JSON record {word, part_of_speech, definition}.
      if (random() < 0.1) {
        out.push({
          messages: [
            ...maybeSystem(),
            { role: 'user', content: pick(JSON_QUESTIONS)(lemma) },
            { role: 'assistant', content: jsonRecord(lemma, first) },
          ],
          split,
        });
      }

      // A tool call: the model asks define_word, reads the result, answers.
      if (random() < 0.02) {
        out.push({
          tools: [DEFINE_TOOL],
          messages: [
            { role: 'user', content: pick(MEANING_QUESTIONS)(lemma) },
            {
              role: 'assistant',
              content: '',
              tool_calls: [
                {
                  id: 'call_0',
                  type: 'function',
                  function: { name: 'define_word', arguments: JSON.stringify({ word: lemma }) },
                },
              ],
            },
            { role: 'tool', tool_call_id: 'call_0', content: jsonRecord(lemma, first) },
            { role: 'assistant', content: definitionReply(lemma, first, false) },
          ],
          split,
        });
      }
    }
  }

  // Greetings on their own, as a first visitor's "Hi" is.
  for (let i = 0; i < 3000; i++) {
    out.push({
      messages: [
        ...maybeSystem(),
        { role: 'user', content: pick(GREETINGS) },
        { role: 'assistant', content: pick(GREETING_REPLIES) },
      ],
      split: i % TEST_EVERY === 0 ? 'test' : 'train',
    });
  }

  // Fisher-Yates with the same PRNG: a fixed order that mixes the kinds.
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

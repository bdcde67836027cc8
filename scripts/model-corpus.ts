// `npm run model:corpus`: the training corpus of the `wordnet-chat` model, from WordNet as Debian ships it
// (`apt-get install wordnet-base`). Writes, deterministically, into artifacts/wordnet-chat/corpus/:
//   train.txt, test.txt        conversations rendered with the chat template, each ended by <|endoftext|>
//   tokenizer.json, tokenizer_config.json   byte-level BPE learned from train.txt (our trainer), ChatML
//   train.bin, test.bin        the token ids of train.txt / test.txt, uint16 little-endian
//   stats.json                 counts, for the model card
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { renderChat } from '../src/tokenizer/chat-template.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { CHAT_TEMPLATE, SPECIAL_TOKENS, buildTokenizerFiles } from './tokenizer/build-tokenizer.js';
import { buildConversations, type Conversation } from './wordnet/chat-corpus.js';
import { readWordNet } from './wordnet/wordnet-db.js';
import { answerHelp } from './lib/help.js';

export const CORPUS_DIR = fileURLToPath(new URL('../artifacts/wordnet-chat/corpus', import.meta.url));
export const CORPUS_SEED = 22;
export const VOCAB_SIZE = 4096;
/** The context the model is trained on, and so the one it declares. */
export const CONTEXT = 512;

const END = SPECIAL_TOKENS[0];

export function renderConversation(c: Conversation): string {
  return renderChat(CHAT_TEMPLATE, c.messages, {}, { addGenerationPrompt: false, tools: c.tools }) + END;
}

function idsToBytes(ids: number[]): Uint8Array {
  const out = new Uint16Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    if (ids[i] > 0xffff) throw new Error(`token id ${ids[i]} does not fit uint16`);
    out[i] = ids[i];
  }
  return new Uint8Array(out.buffer);
}

export function makeCorpus(outDir = CORPUS_DIR): Record<string, number> {
  const t0 = performance.now();
  const wordnet = readWordNet();
  const conversations = buildConversations(wordnet, { seed: CORPUS_SEED });
  const texts = { train: [] as string[], test: [] as string[] };
  for (const c of conversations) texts[c.split].push(renderConversation(c));
  mkdirSync(outDir, { recursive: true });
  const train = texts.train.join('');
  const test = texts.test.join('');
  writeFileSync(join(outDir, 'train.txt'), train);
  writeFileSync(join(outDir, 'test.txt'), test);
  console.log(
    `${conversations.length} conversations (${texts.test.length} held out), ${(performance.now() - t0) / 1000} s`,
  );

  // Merges are learned from the words of the text, never from the ChatML markers.
  const plain = train.replace(/<\|(endoftext|im_start|im_end)\|>/g, '\n');
  const { tokenizerJson, tokenizerConfig } = buildTokenizerFiles({
    vocabSize: VOCAB_SIZE,
    modelMaxLength: CONTEXT,
    corpus: plain,
  });
  writeFileSync(join(outDir, 'tokenizer.json'), `${JSON.stringify(tokenizerJson, null, 2)}\n`);
  writeFileSync(join(outDir, 'tokenizer_config.json'), `${JSON.stringify(tokenizerConfig, null, 2)}\n`);
  console.log(`tokenizer: ${VOCAB_SIZE} tokens, ${(performance.now() - t0) / 1000} s`);

  const tokenizer = TextTokenizer.fromJson(tokenizerJson, tokenizerConfig);
  const stats: Record<string, number> = {
    conversations: conversations.length,
    train_conversations: texts.train.length,
    test_conversations: texts.test.length,
    synsets: wordnet.synsets.size,
    train_bytes: Buffer.byteLength(train),
    test_bytes: Buffer.byteLength(test),
  };
  for (const split of ['train', 'test'] as const) {
    // One conversation at a time: encoding the whole file at once holds every intermediate string.
    const ids: number[] = [];
    for (const text of texts[split]) for (const id of tokenizer.encode(text)) ids.push(id);
    writeFileSync(join(outDir, `${split}.bin`), idsToBytes(ids));
    stats[`${split}_tokens`] = ids.length;
  }
  writeFileSync(join(outDir, 'stats.json'), `${JSON.stringify(stats, null, 2)}\n`);
  console.log(`${JSON.stringify(stats)}; ${(performance.now() - t0) / 1000} s`);
  return stats;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(`Usage: npm run model:corpus
Writes wordnet-chat's training corpus (conversations, tokenizer, token ids) from WordNet as Debian ships it
(apt-get install wordnet-base) into artifacts/wordnet-chat/corpus/, deterministically. Takes no options.`);
  try {
    makeCorpus();
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}

/**
 * Builds tokenizer.json and tokenizer_config.json for the generated test models: a real byte-level BPE
 * (GPT-2 style) trained on the corpus shipped next to this file. Same vocabSize => byte-identical JSON.
 */
import { readFileSync } from 'node:fs';
import { BYTE_TO_CHAR, bytesToByteLevel, gpt2PreTokenize } from '../../src/tokenizer/byte-level.js';
import { trainBpe } from './bpe-trainer.js';

/** Added tokens, ids 0..2 (ChatML as in SmolLM2). */
export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const;

/**
 * ChatML, no default system prompt: `<|im_start|>{role}\n{content}<|im_end|>\n` per message. With
 * `tools`, Qwen 2.5's tool format (Hermes): a system turn lists them, assistant turns carry
 * `<tool_call>` blocks, tool results come back as user turns in `<tool_response>` (see
 * src/tokenizer/tool-format.ts). Without tools it renders exactly the plain ChatML above.
 */
export const CHAT_TEMPLATE =
  "{% if tools %}{{ '<|im_start|>system\\n' }}{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n\\n' }}{% endif %}" +
  "{{ '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}" +
  "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}" +
  '{{ \'\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}{% endif %}' +
  '{% for message in messages %}' +
  "{% if tools and loop.first and message['role'] == 'system' %}" +
  "{% elif message['role'] == 'tool' %}{{ '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}" +
  "{% elif message['role'] == 'assistant' and message['tool_calls'] %}{{ '<|im_start|>assistant\\n' + message['content'] }}" +
  "{% for call in message['tool_calls'] %}{% if message['content'] or not loop.first %}{{ '\\n' }}{% endif %}" +
  "{{ '<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' }}" +
  // OpenAI sends arguments as JSON text; Hugging Face callers (and llama.cpp's template probe) as an object.
  "{% if call['function']['arguments'] is string %}{{ call['function']['arguments'] }}{% else %}{{ call['function']['arguments'] | tojson }}{% endif %}" +
  "{{ '}\\n</tool_call>' }}{% endfor %}{{ '<|im_end|>\\n' }}" +
  "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endif %}" +
  '{% endfor %}' +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export interface TokenizerFiles {
  tokenizerJson: object;
  tokenizerConfig: object;
}

export interface BuildTokenizerOptions {
  /** Tokens wanted in total (specials + 256 bytes + merges); fewer when the corpus runs out of pairs. */
  vocabSize: number;
  /** tokenizer_config.json model_max_length (default 2048). */
  modelMaxLength?: number;
  /** The text the merges are learned from (default: the corpus shipped next to this file). */
  corpus?: string;
}

const CORPUS_URL = new URL('./corpus.txt', import.meta.url);
let corpusCache: string | undefined;

export function readCorpus(): string {
  corpusCache ??= readFileSync(CORPUS_URL, 'utf8');
  return corpusCache;
}

/** Word counts of a text in the byte-level alphabet, keyed in first-seen order (deterministic). */
export function countWords(text: string): Map<string, number> {
  const encoder = new TextEncoder();
  const words = new Map<string, number>();
  for (const piece of gpt2PreTokenize(text)) {
    const word = bytesToByteLevel(encoder.encode(piece));
    words.set(word, (words.get(word) ?? 0) + 1);
  }
  return words;
}

export function buildTokenizerFiles({
  vocabSize,
  modelMaxLength = 2048,
  corpus,
}: BuildTokenizerOptions): TokenizerFiles {
  const minimum = SPECIAL_TOKENS.length + 256;
  if (!Number.isInteger(vocabSize) || vocabSize < minimum) {
    throw new Error(`vocabSize must be an integer >= ${minimum} (specials + 256 bytes), got ${vocabSize}`);
  }
  const { tokens, merges } = trainBpe(countWords(corpus ?? readCorpus()), {
    alphabet: BYTE_TO_CHAR,
    maxTokens: vocabSize - SPECIAL_TOKENS.length,
  });

  const vocab: Record<string, number> = {};
  for (const [id, content] of SPECIAL_TOKENS.entries()) vocab[content] = id;
  tokens.forEach((token, i) => {
    // Merges stay inside pre-tokens, and a special token spans several pre-tokens, so no clash is possible.
    if (token in vocab) throw new Error(`learned token ${JSON.stringify(token)} collides with a special token`);
    vocab[token] = SPECIAL_TOKENS.length + i;
  });

  const addedTokens = SPECIAL_TOKENS.map((content, id) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));

  // Layout and component settings follow GPT-2's / SmolLM2's tokenizer.json (tokenizers >= 0.14), which
  // the Rust tokenizers, @huggingface/tokenizers and transformers.js all read.
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      // "left right" strings: every reader accepts them (the [left, right] form needs newer ones), and a
      // byte-level token never contains a literal space (space is spelled U+0120), so the split is exact.
      merges: merges.map(([left, right]) => `${left} ${right}`),
    },
  };

  const tokenizerConfig = {
    add_bos_token: false,
    add_eos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(
      addedTokens.map(({ id, content, lstrip, normalized, rstrip, single_word, special }) => [
        String(id),
        { content, lstrip, normalized, rstrip, single_word, special },
      ]),
    ),
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: '<|im_start|>',
    chat_template: CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: '<|im_end|>',
    model_max_length: modelMaxLength,
    pad_token: '<|endoftext|>',
    tokenizer_class: 'GPT2Tokenizer',
    unk_token: '<|endoftext|>',
  };

  return { tokenizerJson, tokenizerConfig };
}

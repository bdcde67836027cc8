// A GGUF file's tokenizer (its tokenizer.ggml.* metadata) -> tokenizer.json and tokenizer_config.json that
// our TextTokenizer loads and that encode as llama.cpp does:
// - `gpt2`: byte-level BPE with the file's merges, and the pre-tokenizer llama.cpp runs for its
//   tokenizer.ggml.pre (llama-vocab.cpp's regexes; others are refused by name);
// - `llama`: SentencePiece (scores, byte fallback), through sentencepiece-json.ts.
// Token types (llama_token_type) decide the added tokens: CONTROL and UNKNOWN tokens are special,
// USER_DEFINED ones are added but not special; BYTE tokens are <0xXX> fallbacks.
// Where llama.cpp and the model's own tokenizer.json part, we follow tokenizer.json (what the model was
// trained on; test/real-tokenizers.test.ts checks Qwen3's and Gemma 3's token for token):
// - qwen2: tokenizer.json normalises to NFC first; llama.cpp does not, so a decomposed "e\u0301" differs;
// - SentencePiece user-defined pieces (Gemma 3's "▁▁", "\n\n", "<table>"): the converter writes them with
//   spaces for ▁ and score -1000, and llama.cpp only matches them in the text as typed. tokenizer.json
//   has them as added tokens spelled with ▁ and as pieces its merges build, at the score SentencePiece
//   gives them (0): typed spaces merge into "▁▁" and a typed "▁▁" is matched whole. So they are here.
import type { GgufMetadata } from '../../src/engine/formats/gguf/gguf-metadata.js';
import { bosTemplate, SPACE, sentencePieceTokenizerJson } from './sentencepiece-json.js';

const TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

/** Contractions as GPT-2 spells them, case-insensitive the way llama.cpp writes it (no inline flags in JS). */
const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const LLAMA3_REGEX = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const QWEN2_REGEX = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;

const byteLevel = (useRegex: boolean) => ({
  type: 'ByteLevel',
  add_prefix_space: false,
  trim_offsets: true,
  use_regex: useRegex,
});
const split = (regex: string) => ({
  type: 'Sequence',
  pretokenizers: [{ type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false }, byteLevel(false)],
});

/**
 * llama.cpp's pre-tokenizers (tokenizer.ggml.pre) as Hugging Face pre_tokenizer objects: `gpt-2` is GPT-2's
 * regex (ByteLevel's own), `smollm` splits every digit first (as llama.cpp's "\p{N}" pass), `llama-bpe`
 * (Llama 3) and `qwen2` split by their regexes.
 */
const PRE_TOKENIZERS: Record<string, { preTokenizer: unknown; ignoreMerges: boolean; normalizer?: unknown }> = {
  'gpt-2': { preTokenizer: byteLevel(true), ignoreMerges: false },
  smollm: {
    preTokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevel(true)] },
    ignoreMerges: false,
  },
  // llama.cpp takes a whole pre-token that is in the vocabulary as it is, before merging (ignore_merges).
  'llama-bpe': { preTokenizer: split(LLAMA3_REGEX), ignoreMerges: true },
  qwen2: { preTokenizer: split(QWEN2_REGEX), ignoreMerges: false, normalizer: { type: 'NFC' } },
};
export const SUPPORTED_PRE = Object.keys(PRE_TOKENIZERS);

/** Texts llama.cpp treats as end of generation when they are control tokens (besides eos/eot/eom). */
const EOG_TEXTS = ['<|endoftext|>', '<|im_end|>', '<|eot_id|>', '<|eom_id|>', '<|end|>', '<end_of_turn>'];

export interface GgufTokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  bosTokenId: number | null;
  /** End of generation: eos, eot, eom and the control tokens llama.cpp recognises as such. */
  eosTokenIds: number[];
}

function tokenTypes(meta: GgufMetadata, n: number): ArrayLike<number> {
  if (!meta.has('tokenizer.ggml.token_type')) return new Array<number>(n).fill(TYPE.NORMAL);
  const types = meta.numbers('tokenizer.ggml.token_type');
  if (types.length !== n)
    throw new Error(`GGUF metadata tokenizer.ggml.token_type has ${types.length} entries for ${n} tokens`);
  return types;
}

function tokenId(meta: GgufMetadata, key: string, n: number): number | null {
  if (!meta.has(key)) return null;
  const id = meta.u32(key);
  if (id >= n) throw new Error(`GGUF metadata ${key} is ${id}, past the ${n} tokens`);
  return id;
}

function addedTokens(types: ArrayLike<number>): { id: number; special: boolean }[] {
  const added: { id: number; special: boolean }[] = [];
  for (let id = 0; id < types.length; id++) {
    const t = types[id];
    if (t === TYPE.CONTROL || t === TYPE.UNKNOWN || t === TYPE.USER_DEFINED)
      added.push({ id, special: t !== TYPE.USER_DEFINED });
  }
  return added;
}

function gpt2TokenizerJson(meta: GgufMetadata, tokens: string[], types: ArrayLike<number>, bos: string | null) {
  const pre = meta.str('tokenizer.ggml.pre', 'default');
  const choice = PRE_TOKENIZERS[pre];
  if (!choice)
    throw new Error(
      `GGUF tokenizer.ggml.pre "${pre}" is not supported (the pre-tokenizers imported are ${SUPPORTED_PRE.join(', ')})`,
    );
  const vocab: Record<string, number> = Object.create(null) as Record<string, number>;
  // A text listed twice keeps its first id, as llama.cpp's text -> id map does.
  tokens.forEach((t, id) => {
    if (!Object.hasOwn(vocab, t)) vocab[t] = id;
  });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens(types).map(({ id, special }) => ({
      id,
      content: tokens[id],
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special,
    })),
    normalizer: choice.normalizer ?? null,
    pre_tokenizer: choice.preTokenizer,
    post_processor:
      bos === null
        ? { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true }
        : bosTemplate(bos, vocab[bos]),
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: choice.ignoreMerges,
      vocab,
      merges: meta.strings('tokenizer.ggml.merges'),
    },
  };
}

/** The tokenizer files of a GGUF file's metadata; `contextLength` becomes model_max_length. */
export function ggufTokenizerFiles(meta: GgufMetadata, contextLength: number): GgufTokenizerFiles {
  const model = meta.str('tokenizer.ggml.model');
  if (model !== 'gpt2' && model !== 'llama')
    throw new Error(
      `GGUF tokenizer.ggml.model "${model}" is not supported (gpt2 byte-level BPE and llama SentencePiece are)`,
    );
  const tokens = meta.strings('tokenizer.ggml.tokens');
  const n = tokens.length;
  const types = tokenTypes(meta, n);
  const spm = model === 'llama';
  // llama.cpp's defaults when a file leaves these out: SentencePiece vocabularies add BOS, BPE ones do not.
  const bosId = tokenId(meta, 'tokenizer.ggml.bos_token_id', n) ?? (spm ? 1 : null);
  const eosId = tokenId(meta, 'tokenizer.ggml.eos_token_id', n) ?? (spm ? 2 : null);
  const unkId = tokenId(meta, 'tokenizer.ggml.unknown_token_id', n) ?? (spm ? 0 : null);
  const padId = tokenId(meta, 'tokenizer.ggml.padding_token_id', n);
  const addBos = meta.bool('tokenizer.ggml.add_bos_token', spm) && bosId !== null;
  const addEos = meta.bool('tokenizer.ggml.add_eos_token', false);
  if (addEos) throw new Error('GGUF tokenizer.ggml.add_eos_token is true: appending EOS to prompts is not supported');
  const bos = addBos ? tokens[bosId!] : null;

  let tokenizerJson: Record<string, unknown>;
  if (spm) {
    if (meta.bool('tokenizer.ggml.remove_extra_whitespaces', false))
      throw new Error('GGUF tokenizer.ggml.remove_extra_whitespaces is true: that normalisation is not supported');
    const scores = meta.has('tokenizer.ggml.scores')
      ? meta.numbers('tokenizer.ggml.scores')
      : new Array<number>(n).fill(0);
    if (scores.length !== n) throw new Error(`GGUF tokenizer.ggml.scores has ${scores.length} entries for ${n} tokens`);
    const userDefined = (id: number) => types[id] === TYPE.USER_DEFINED;
    tokenizerJson = sentencePieceTokenizerJson({
      pieces: tokens.map((t, id) => (userDefined(id) ? t.replaceAll(' ', SPACE) : t)),
      scores: Float32Array.from(scores, (s, id) => (userDefined(id) ? 0 : s)),
      added: addedTokens(types).map((t) => (userDefined(t.id) ? { ...t, mergeable: true } : t)),
      isByte: (id) => types[id] === TYPE.BYTE,
      unkToken: tokens[unkId ?? 0],
      bosToken: bos,
      addSpacePrefix: meta.bool('tokenizer.ggml.add_space_prefix', true),
    });
  } else tokenizerJson = gpt2TokenizerJson(meta, tokens, types, bos);

  const eog = new Set<number>();
  for (const key of ['eos_token_id', 'eot_token_id', 'eom_token_id']) {
    const id = tokenId(meta, `tokenizer.ggml.${key}`, n);
    if (id !== null) eog.add(id);
  }
  for (let id = 0; id < n; id++) if (types[id] === TYPE.CONTROL && EOG_TEXTS.includes(tokens[id])) eog.add(id);

  const text = (id: number | null) => (id === null ? undefined : tokens[id]);
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: false,
    bos_token: text(bosId),
    eos_token: text(eosId),
    unk_token: text(unkId),
    pad_token: text(padId),
    model_max_length: contextLength,
    clean_up_tokenization_spaces: false,
    tokenizer_class: spm ? 'LlamaTokenizerFast' : 'GPT2Tokenizer',
  };
  if (meta.has('tokenizer.chat_template')) tokenizerConfig.chat_template = meta.str('tokenizer.chat_template');
  for (const k of Object.keys(tokenizerConfig)) if (tokenizerConfig[k] === undefined) delete tokenizerConfig[k];
  return { tokenizerJson, tokenizerConfig, bosTokenId: bosId, eosTokenIds: [...eog] };
}

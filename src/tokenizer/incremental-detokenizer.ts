/**
 * Streams text token by token. Works on bytes: a character whose UTF-8 bytes span several tokens is held
 * back until its last byte arrives, so no piece ever shows a transient U+FFFD.
 *
 * Invariant: push(id1) + push(id2) + ... + flush() === tokenizer.decode([id1, id2, ...], { skipSpecialTokens }).
 * It holds because the HF ByteLevel decoder (a) drops skipped special tokens before decoding, so bytes on
 * either side of one join up, and (b) decodes the bytes between kept added tokens as separate chunks, each
 * with a non-fatal TextDecoder; a streaming TextDecoder gives the same text as a one-shot decode.
 */
import type { TextTokenizer } from './tokenizer.js';

export interface IncrementalDetokenizerOptions {
  /** Leave special tokens out of the text (default true: clients see no `<|im_end|>`). */
  skipSpecialTokens?: boolean;
}

export class IncrementalDetokenizer {
  private readonly skipSpecialTokens: boolean;
  // ignoreBOM: true keeps a leading U+FEFF, as the HF decoder's TextDecoder does.
  private readonly decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

  constructor(
    private readonly tokenizer: TextTokenizer,
    { skipSpecialTokens = true }: IncrementalDetokenizerOptions = {},
  ) {
    this.skipSpecialTokens = skipSpecialTokens;
  }

  /** Text completed by this token; '' while a character is still incomplete. */
  push(tokenId: number): string {
    const tokenizer = this.tokenizer;
    if (this.skipSpecialTokens && tokenizer.isSpecial(tokenId)) return '';
    if (tokenizer.isAddedToken(tokenId)) {
      // A kept added token ends the current byte chunk: pending bytes are decoded (as U+FFFD if incomplete).
      return this.decoder.decode() + tokenizer.addedTokenText(tokenId);
    }
    return this.decoder.decode(tokenizer.tokenBytes(tokenId), { stream: true });
  }

  /** Whatever is left at the end: an incomplete trailing character becomes U+FFFD. Resets the stream. */
  flush(): string {
    return this.decoder.decode();
  }
}

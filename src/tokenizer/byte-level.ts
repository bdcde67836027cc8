/**
 * GPT-2's byte <-> unicode table. Byte-level BPE vocabularies spell every byte as one printable code
 * point so that merges can be stored as ordinary strings: printable Latin-1 bytes map to themselves,
 * the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order.
 */

/** BYTE_TO_CHAR[b] is the vocabulary character that stands for byte b. */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const table: string[] = new Array(256);
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    table[b] = String.fromCharCode(printable(b) ? b : 256 + shifted++);
  }
  return table;
})();

/** Inverse of BYTE_TO_CHAR, indexed by code point (all mapped code points are below 0x144). */
const CHAR_TO_BYTE: Int16Array = (() => {
  const inverse = new Int16Array(0x144).fill(-1);
  for (const [b, ch] of BYTE_TO_CHAR.entries()) inverse[ch.charCodeAt(0)] = b;
  return inverse;
})();

/** The raw bytes a byte-level token string stands for. Throws on characters outside the table. */
export function byteLevelToBytes(token: string): Uint8Array {
  const out = new Uint8Array(token.length);
  for (let i = 0; i < token.length; i++) {
    const code = token.charCodeAt(i);
    const b = code < CHAR_TO_BYTE.length ? CHAR_TO_BYTE[code] : -1;
    if (b < 0)
      throw new Error(`token ${JSON.stringify(token)} is not a byte-level string (char U+${code.toString(16)})`);
    out[i] = b;
  }
  return out;
}

/** The byte-level spelling of arbitrary bytes (e.g. the UTF-8 of a pre-token). */
export function bytesToByteLevel(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += BYTE_TO_CHAR[b];
  return s;
}

/**
 * GPT-2's pre-tokenizer split (the one the ByteLevel pre-tokenizer applies with use_regex: true in both
 * the Rust and the JS tokenizers). Training must split exactly like encoding does, so both use this.
 */
export const GPT2_SPLIT_REGEX = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** Splits text into GPT-2 pre-tokens (words with their leading space, digit runs, punctuation runs, spaces). */
export function gpt2PreTokenize(text: string): string[] {
  return text.match(GPT2_SPLIT_REGEX) ?? [];
}

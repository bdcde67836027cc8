/**
 * Token bytes for SentencePiece-style vocabularies (Llama 2, llama2.c, TinyLlama): pieces spell a space
 * as "▁" and bytes the vocabulary lacks as "<0xXX>" tokens (byte fallback). Their tokenizer.json decoder
 * is Replace ▁ -> " " + ByteFallback (+ Fuse, Strip), unlike GPT-2 byte-level vocabularies.
 */
const BYTE_PIECE = /^<0x([0-9A-Fa-f]{2})>$/;
const utf8 = new TextEncoder();

export function sentencePieceToBytes(piece: string): Uint8Array {
  const byte = BYTE_PIECE.exec(piece);
  if (byte) return Uint8Array.of(parseInt(byte[1], 16));
  return utf8.encode(piece.replaceAll('▁', ' '));
}

/** True when tokenizer.json decodes with ByteFallback (SentencePiece-style) rather than ByteLevel. */
export function usesByteFallback(tokenizerJson: Record<string, unknown>): boolean {
  const decoder = tokenizerJson.decoder as { type?: string; decoders?: { type?: string }[] } | null | undefined;
  if (!decoder) return false;
  const types = decoder.type === 'Sequence' ? (decoder.decoders ?? []).map((d) => d.type) : [decoder.type];
  return types.includes('ByteFallback') || types.includes('Metaspace');
}

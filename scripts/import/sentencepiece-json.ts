// A SentencePiece-style vocabulary (pieces with scores, byte-fallback tokens <0xXX>, a few special tokens)
// -> a Hugging Face tokenizer.json that encodes as llama.cpp's SPM tokenizer and llama2.c's run.c do:
// prepend "▁" (the dummy prefix) and spell spaces "▁", split into characters (a character that is no piece
// becomes its UTF-8 bytes as <0xXX> tokens), then repeatedly merge the adjacent pair whose concatenation is
// a piece of the highest score (leftmost on ties).
//
// The Hugging Face form, the one transformers uses for SentencePiece Llama tokenizers:
//   normalizer      Prepend "▁" (when the vocabulary adds a space prefix) + Replace " " -> "▁"
//   model           BPE with byte_fallback; merges = every split (a, b) of every piece whose two halves are
//                   pieces too, ranked as transformers' converter ranks them (generate_merges): by the merged
//                   piece's score (highest first), then the halves' lengths (longest first), then id. BPE
//                   then merges the lowest-ranked adjacent pair first (leftmost on ties): the rule above,
//                   given that a piece's score orders it against every other piece. Pieces with equal scores
//                   are the one case where the two can differ (SentencePiece vocabularies give most pieces
//                   their own).
//   decoder         Replace ▁ -> " ", ByteFallback, Fuse, Strip one leading space
//   post_processor  <s> $A when the vocabulary adds BOS
// Added tokens (special ones and user-defined) are split out of the text first; like llama.cpp, Hugging Face
// then applies the normalizer, so the dummy prefix, to each stretch of text between them. Only a `mergeable`
// one (a user-defined piece such as Gemma's "▁▁") is also in the merges, so spaces typed become it as well.

export const SPACE = '▁';
const BYTE_PIECE = /^<0x[0-9A-Fa-f]{2}>$/;

export interface SentencePieceVocab {
  /** Pieces by id, spaces spelled ▁. */
  pieces: readonly string[];
  scores: ArrayLike<number>;
  /**
   * Tokens matched as whole strings before the model runs; `special` ones are dropped by skip-special decoding.
   * A `mergeable` one is also a piece the merges build (by its score), as tokenizer.json has user-defined ones.
   */
  added: readonly { id: number; special: boolean; mergeable?: boolean }[];
  /** Ids of byte-fallback tokens (<0xXX>): in the vocabulary, never merged. */
  isByte: (id: number) => boolean;
  unkToken: string;
  /** The token the post-processor puts first, or null when nothing is added. */
  bosToken: string | null;
  addSpacePrefix: boolean;
}

export const isBytePiece = (piece: string): boolean => BYTE_PIECE.test(piece);

/** The post-processor that puts BOS (text `bos`, id `id`) before each sequence, as tokenizers' TemplateProcessing does. */
export function bosTemplate(bos: string, id: number): Record<string, unknown> {
  return {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [
      { SpecialToken: { id: bos, type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: bos, type_id: 1 } },
      { Sequence: { id: 'B', type_id: 1 } },
    ],
    special_tokens: { [bos]: { id: bos, ids: [id], tokens: [bos] } },
  };
}

export function sentencePieceTokenizerJson(v: SentencePieceVocab): Record<string, unknown> {
  const { pieces, scores } = v;
  const addedIds = new Set(v.added.filter((t) => !t.mergeable).map((t) => t.id));
  // No prototype: pieces such as "constructor" or "toString" are ordinary tokens, not inherited keys.
  const vocab: Record<string, number> = Object.create(null) as Record<string, number>;
  const mergeable = new Map<string, number>();
  pieces.forEach((piece, id) => {
    if (Object.hasOwn(vocab, piece))
      throw new Error(`piece ${JSON.stringify(piece)} appears twice (ids ${vocab[piece]} and ${id})`);
    vocab[piece] = id;
    if (!addedIds.has(id) && !v.isByte(id)) mergeable.set(piece, id);
  });

  const merges: { a: string; b: string; score: number; id: number; split: number; right: number }[] = [];
  for (const [piece, id] of mergeable) {
    const chars = Array.from(piece);
    for (let k = 1; k < chars.length; k++) {
      const a = chars.slice(0, k).join('');
      const b = chars.slice(k).join('');
      if (mergeable.has(a) && mergeable.has(b))
        merges.push({ a, b, score: scores[id], id, split: k, right: chars.length - k });
    }
  }
  merges.sort((x, y) => y.score - x.score || y.split - x.split || y.right - x.right || x.id - y.id);

  const bos = v.bosToken;
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: v.added.map(({ id, special }) => ({
      id,
      content: pieces[id],
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special,
    })),
    normalizer: {
      type: 'Sequence',
      normalizers: [
        ...(v.addSpacePrefix ? [{ type: 'Prepend', prepend: SPACE }] : []),
        { type: 'Replace', pattern: { String: ' ' }, content: SPACE },
      ],
    },
    pre_tokenizer: null,
    post_processor: bos === null ? null : bosTemplate(bos, vocab[bos]),
    decoder: {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: SPACE }, content: ' ' },
        { type: 'ByteFallback' },
        { type: 'Fuse' },
        ...(v.addSpacePrefix ? [{ type: 'Strip', content: ' ', start: 1, stop: 0 }] : []),
      ],
    },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: v.unkToken,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab,
      merges: merges.map((m) => [m.a, m.b]),
    },
  };
}

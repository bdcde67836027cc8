// llama2.c's tokenizer.bin -> a Hugging Face tokenizer.json that encodes exactly as run.c's `encode`.
//
// tokenizer.bin (little-endian): int32 max_token_length, then for each of vocab_size ids:
// float32 score, int32 len, len bytes of the piece (UTF-8; spaces are real spaces, byte tokens are
// spelled "<0xXX>"). vocab_size is not in the file: it comes from the checkpoint header.
//
// run.c's encode: [BOS] + the " " dummy prefix + one token per UTF-8 code point (a code point not
// in the vocabulary becomes its bytes, id = byte + 3), then repeatedly merge the adjacent pair whose
// concatenation is in the vocabulary with the highest score (leftmost on ties), until none is left.
//
// The Hugging Face form (the one transformers uses for SentencePiece Llama tokenizers):
//   normalizer  Prepend "▁" + Replace " " -> "▁"      (the dummy prefix; pieces spell spaces as ▁)
//   model       BPE with byte_fallback; merges = every split (a, b) of every piece whose two halves
//               are pieces too, ranked by the merged piece's score (highest first). BPE then merges
//               the lowest-ranked adjacent pair first (leftmost on ties): run.c's rule, given that a
//               piece's score orders it against every other piece. Pieces with equal scores (run.c
//               takes the leftmost pair, BPE the lower rank) are the one case where they can differ;
//               SentencePiece vocabularies give every mergeable piece its own score.
//   decoder     Replace ▁ -> " ", ByteFallback, Fuse, Strip one leading space
//   post_processor  <s> $A  (run.c always starts with BOS)
// Ids 0, 1, 2 are <unk>, <s>, </s>, as run.c hard-codes them (llama2.c spells 1 and 2 "\n<s>\n" and
// "\n</s>\n" in the file; they are never produced by merges).

export interface Llama2cVocab {
  maxTokenLength: number;
  pieces: string[];
  scores: Float32Array;
}

const BYTE_PIECE = /^<0x[0-9A-F]{2}>$/;
const SPACE = '▁';
export const LLAMA2C_SPECIALS = ['<unk>', '<s>', '</s>'] as const;

export function readLlama2cTokenizer(bytes: Uint8Array, vocabSize: number): Llama2cVocab {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  let at = 0;
  const need = (n: number, what: string) => {
    if (at + n > bytes.byteLength)
      throw new Error(`tokenizer.bin: truncated at ${what} (is vocab_size ${vocabSize} right for this file?)`);
  };
  need(4, 'max_token_length');
  const maxTokenLength = dv.getInt32(0, true);
  at = 4;
  const pieces: string[] = [];
  const scores = new Float32Array(vocabSize);
  for (let id = 0; id < vocabSize; id++) {
    need(8, `token ${id}`);
    scores[id] = dv.getFloat32(at, true);
    const len = dv.getInt32(at + 4, true);
    at += 8;
    if (len < 0 || len > maxTokenLength)
      throw new Error(`tokenizer.bin: token ${id} has length ${len} (max_token_length ${maxTokenLength})`);
    need(len, `token ${id}`);
    try {
      pieces.push(utf8.decode(bytes.subarray(at, at + len)));
    } catch {
      throw new Error(`tokenizer.bin: token ${id} is not valid UTF-8`);
    }
    at += len;
  }
  if (at !== bytes.byteLength)
    throw new Error(
      `tokenizer.bin: ${bytes.byteLength - at} bytes left after ${vocabSize} tokens: vocab_size does not match this file`,
    );
  for (let b = 0; b < 256; b++) {
    const want = `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;
    if (pieces[b + 3] !== want)
      throw new Error(
        `tokenizer.bin: id ${b + 3} should be the byte token ${want} (run.c's byte fallback is id = byte + 3), found ${JSON.stringify(pieces[b + 3])}`,
      );
  }
  return { maxTokenLength, pieces, scores };
}

const toHf = (piece: string) => piece.replaceAll(' ', SPACE);

/** tokenizer.json and tokenizer_config.json for a llama2.c vocabulary. */
export function llama2cTokenizerFiles(vocab: Llama2cVocab): {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
} {
  const { pieces, scores } = vocab;
  // No prototype: pieces such as "constructor" or "toString" are ordinary tokens, not inherited keys.
  const hfVocab: Record<string, number> = Object.create(null) as Record<string, number>;
  const idOf = new Map<string, number>(); // llama2.c spelling -> id, mergeable pieces only
  pieces.forEach((piece, id) => {
    const name = id < 3 ? LLAMA2C_SPECIALS[id] : toHf(piece);
    if (Object.hasOwn(hfVocab, name))
      throw new Error(`tokenizer.bin: piece ${JSON.stringify(piece)} appears twice (ids ${hfVocab[name]} and ${id})`);
    hfVocab[name] = id;
    if (id >= 3 && !BYTE_PIECE.test(piece)) idOf.set(piece, id);
  });

  const merges: { a: string; b: string; score: number; id: number; split: number }[] = [];
  for (const [piece, id] of idOf) {
    const chars = Array.from(piece);
    for (let k = 1; k < chars.length; k++) {
      const a = chars.slice(0, k).join('');
      const b = chars.slice(k).join('');
      if (idOf.has(a) && idOf.has(b)) merges.push({ a, b, score: scores[id], id, split: k });
    }
  }
  merges.sort((x, y) => y.score - x.score || x.id - y.id || x.split - y.split);

  const special = (id: number) => ({
    id,
    content: LLAMA2C_SPECIALS[id],
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [special(0), special(1), special(2)],
    normalizer: {
      type: 'Sequence',
      normalizers: [
        { type: 'Prepend', prepend: SPACE },
        { type: 'Replace', pattern: { String: ' ' }, content: SPACE },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [
        { SpecialToken: { id: '<s>', type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '<s>', type_id: 1 } },
        { Sequence: { id: 'B', type_id: 1 } },
      ],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: SPACE }, content: ' ' },
        { type: 'ByteFallback' },
        { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 },
      ],
    },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: '<unk>',
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab: hfVocab,
      merges: merges.map((m) => [toHf(m.a), toHf(m.b)]),
    },
  };
  const tokenizerConfig = {
    add_bos_token: true,
    add_eos_token: false,
    bos_token: '<s>',
    eos_token: '</s>',
    unk_token: '<unk>',
    model_max_length: 1 << 30,
    tokenizer_class: 'LlamaTokenizerFast',
    clean_up_tokenization_spaces: false,
    legacy: true,
    // llama2.c models are base models: a chat turn is plain text after BOS, as run.c's generate mode feeds it.
    chat_template:
      "{{ bos_token }}{% for message in messages %}{% if not loop.first %}{{ '\\n' }}{% endif %}{{ message['content'] }}{% endfor %}",
  };
  return { tokenizerJson, tokenizerConfig };
}

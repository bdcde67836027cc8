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
// The Hugging Face form is sentencepiece-json.ts's (BPE with a merge for every split of every piece,
// ranked by the merged piece's score, the ▁ dummy prefix, byte fallback, <s> first), which is run.c's rule.
// Ids 0, 1, 2 are <unk>, <s>, </s>, as run.c hard-codes them (llama2.c spells 1 and 2 "\n<s>\n" and
// "\n</s>\n" in the file; they are never produced by merges).

import { SPACE, sentencePieceTokenizerJson } from './sentencepiece-json.js';

export interface Llama2cVocab {
  maxTokenLength: number;
  pieces: string[];
  scores: Float32Array;
}

const BYTE_PIECE = /^<0x[0-9A-F]{2}>$/;
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
  const tokenizerJson = sentencePieceTokenizerJson({
    pieces: vocab.pieces.map((piece, id) => (id < 3 ? LLAMA2C_SPECIALS[id] : toHf(piece))),
    scores: vocab.scores,
    added: LLAMA2C_SPECIALS.map((_, id) => ({ id, special: true })),
    isByte: (id) => id >= 3 && BYTE_PIECE.test(vocab.pieces[id]),
    unkToken: '<unk>',
    // run.c always starts with BOS.
    bosToken: '<s>',
    addSpacePrefix: true,
  });
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

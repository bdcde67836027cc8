// bench-135m's tokenizer is trained on the small corpus beside the generator and stops at 5,868 tokens,
// while SmolLM2's has 49,152 (and 48,900 merges): what the engine holds per token (the tokenizer's tables,
// the sampler's rows) is measured on a tokenizer of the real size. This extends a byte-level BPE with
// made-up merges of its own tokens (each result a new token, lengths like a real vocabulary's) until it has
// `vocabSize` entries, and writes it into a copy of the model folder whose weights are hard links.
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Xoshiro128 } from '../../src/engine/sampling/rng.js';

interface BpeTokenizerJson {
  added_tokens: { id: number }[];
  model: { type: string; vocab: Record<string, number>; merges: string[] };
}

/** The tokenizer with merges added until its vocabulary has `vocabSize` ids (specials included). */
export function extendBpeVocab(tokenizer: BpeTokenizerJson, vocabSize: number, seed = 7): BpeTokenizerJson {
  const { vocab, merges } = tokenizer.model;
  if (tokenizer.model.type !== 'BPE') throw new Error(`a ${tokenizer.model.type} tokenizer, not BPE`);
  const out: Record<string, number> = { ...vocab };
  const added = [...merges];
  // Pieces to join: the shorter half of the vocabulary, so new tokens average ~6 characters as real ones do.
  const pieces = Object.keys(vocab)
    .filter((t) => t.length <= 4)
    .sort();
  const rng = new Xoshiro128(seed);
  let next = Math.max(...Object.values(vocab), ...tokenizer.added_tokens.map((t) => t.id)) + 1;
  while (next < vocabSize) {
    const a = pieces[Math.floor(rng.nextFloat() * pieces.length)];
    const b = pieces[Math.floor(rng.nextFloat() * pieces.length)];
    const token = a + b;
    if (token in out) continue;
    out[token] = next++;
    added.push(`${a} ${b}`);
  }
  return { ...tokenizer, model: { ...tokenizer.model, vocab: out, merges: added } };
}

/** `src` with its tokenizer extended to `vocabSize` ids, at `dst` (remade when older than the source's stamp). */
export function fullVocabFolder(src: string, dst: string, vocabSize: number): string {
  const stamp = `${readFileSync(join(src, '.stamp'), 'utf8')}:${vocabSize}`;
  if (existsSync(join(dst, '.stamp')) && readFileSync(join(dst, '.stamp'), 'utf8') === stamp) return dst;
  rmSync(dst, { recursive: true, force: true });
  mkdirSync(join(dst, 'onnx'), { recursive: true });
  for (const f of ['config.json', 'generation_config.json', 'tokenizer_config.json'])
    writeFileSync(join(dst, f), readFileSync(join(src, f)));
  const tokenizer = JSON.parse(readFileSync(join(src, 'tokenizer.json'), 'utf8')) as BpeTokenizerJson;
  writeFileSync(join(dst, 'tokenizer.json'), JSON.stringify(extendBpeVocab(tokenizer, vocabSize)));
  for (const f of readdirSync(join(src, 'onnx'))) linkSync(join(src, 'onnx', f), join(dst, 'onnx', f));
  writeFileSync(join(dst, '.stamp'), stamp);
  return dst;
}

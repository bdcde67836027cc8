// Test-side llama2.c: writes checkpoints and tokenizer.bin files in run.c's binary formats, trains a small
// SentencePiece-like vocabulary, and ports run.c's `encode` (BPE by score, dummy prefix, byte fallback)
// line for line. Shares no code with scripts/import.
import { writeFileSync } from 'node:fs';
import { makeWeights } from '../../scripts/model/weights.js';
import type { LlamaShape } from '../../scripts/model/presets.js';

export interface Llama2cTestVocab {
  pieces: string[]; // llama2.c spelling: spaces are spaces
  scores: number[];
}

/** 3 specials, 256 byte tokens, the corpus' characters, then `merges` pieces learned by greedy pair counting. */
export function trainVocab(corpus: string, merges: number): Llama2cTestVocab {
  const pieces = ['<unk>', '\n<s>\n', '\n</s>\n'];
  const scores = [0, 0, 0];
  for (let b = 0; b < 256; b++) {
    pieces.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    scores.push(0);
  }
  // Words as SentencePiece sees them: each starts with its space.
  const words = new Map<string, number>();
  for (const w of ` ${corpus.replace(/\s+/g, ' ')}`.split(/(?= )/)) words.set(w, (words.get(w) ?? 0) + 1);
  const charCount = new Map<string, number>();
  for (const [w, n] of words) for (const c of Array.from(w)) charCount.set(c, (charCount.get(c) ?? 0) + n);
  // Leave a few characters out, so byte fallback is exercised on ordinary text too.
  const chars = [...charCount]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .map(([c]) => c)
    .filter((c) => !'QZ€'.includes(c));
  const known = new Set(chars);
  let seqs = [...words].map(([w, n]) => ({ syms: Array.from(w).map((c) => (known.has(c) ? c : null)), n }));
  const learned: string[] = [];
  const have = new Set<string>(chars);
  for (let m = 0; m < merges; m++) {
    const pairs = new Map<string, { a: string; b: string; n: number }>();
    for (const { syms, n } of seqs) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const a = syms[i];
        const b = syms[i + 1];
        if (a === null || b === null) continue;
        const key = `${a}\u0000${b}`;
        const e = pairs.get(key) ?? { a, b, n: 0 };
        e.n += n;
        pairs.set(key, e);
      }
    }
    let best: { a: string; b: string; n: number } | undefined;
    for (const e of pairs.values())
      if (!have.has(e.a + e.b) && (!best || e.n > best.n || (e.n === best.n && e.a + e.b < best.a + best.b))) best = e;
    if (!best) break;
    const merged = best.a + best.b;
    learned.push(merged);
    have.add(merged);
    seqs = seqs.map(({ syms, n }) => {
      const out: (string | null)[] = [];
      for (let i = 0; i < syms.length; i++) {
        if (i + 1 < syms.length && syms[i] === best.a && syms[i + 1] === best.b) {
          out.push(merged);
          i++;
        } else out.push(syms[i]);
      }
      return { syms: out, n };
    });
  }
  // SentencePiece order: merged pieces first by merge order (score 0, -1, ...), then single characters.
  learned.forEach((p, i) => {
    pieces.push(p);
    scores.push(-i);
  });
  chars.forEach((c, i) => {
    pieces.push(c);
    scores.push(-learned.length - i);
  });
  return { pieces, scores };
}

export function writeTokenizerBin(path: string, vocab: Llama2cTestVocab): void {
  const enc = new TextEncoder();
  const encoded = vocab.pieces.map((p) => enc.encode(p));
  const maxLen = Math.max(...encoded.map((e) => e.length));
  const out = Buffer.alloc(4 + encoded.reduce((s, e) => s + 8 + e.length, 0));
  out.writeInt32LE(maxLen, 0);
  let at = 4;
  encoded.forEach((e, i) => {
    out.writeFloatLE(vocab.scores[i], at);
    out.writeInt32LE(e.length, at + 4);
    out.set(e, at + 8);
    at += 8 + e.length;
  });
  writeFileSync(path, out);
}

/**
 * A random, well-conditioned checkpoint (the generator's weights for `shape`) written in run.c's layout:
 * matrices (out, in), w1/w2/w3 = gate/down/up, unused RoPE tables, wcls when not shared.
 */
export function writeCheckpoint(path: string, shape: LlamaShape, seq: number, seed: number): void {
  const w = makeWeights(shape, seed);
  const t = (name: string) => w.get(name)!;
  const outIn = (name: string): Float32Array => {
    const { dims, data } = t(name); // (in, out)
    const [nIn, nOut] = dims;
    const o = new Float32Array(data.length);
    for (let i = 0; i < nIn; i++) for (let j = 0; j < nOut; j++) o[j * nIn + i] = data[i * nOut + j];
    return o;
  };
  const L = shape.numLayers;
  const layers = (f: (l: number) => Float32Array) => Array.from({ length: L }, (_, l) => f(l));
  const p = (l: number, s: string) => `model.layers.${l}.${s}`;
  const parts: Float32Array[] = [
    t('model.embed_tokens.weight').data,
    ...layers((l) => t(p(l, 'input_layernorm.weight')).data),
    ...layers((l) => outIn(p(l, 'self_attn.q_proj.weight'))),
    ...layers((l) => outIn(p(l, 'self_attn.k_proj.weight'))),
    ...layers((l) => outIn(p(l, 'self_attn.v_proj.weight'))),
    ...layers((l) => outIn(p(l, 'self_attn.o_proj.weight'))),
    ...layers((l) => t(p(l, 'post_attention_layernorm.weight')).data),
    ...layers((l) => outIn(p(l, 'mlp.gate_proj.weight'))),
    ...layers((l) => outIn(p(l, 'mlp.down_proj.weight'))),
    ...layers((l) => outIn(p(l, 'mlp.up_proj.weight'))),
    t('model.norm.weight').data,
    new Float32Array(seq * shape.headDim).fill(0.5), // freq_cis_real + freq_cis_imag (run.c ignores them)
    ...(shape.tieWordEmbeddings ? [] : [outIn('lm_head.weight')]),
  ];
  const header = Int32Array.of(
    shape.hiddenSize,
    shape.intermediateSize,
    L,
    shape.numHeads,
    shape.numKvHeads,
    shape.tieWordEmbeddings ? shape.vocabSize : -shape.vocabSize,
    seq,
  );
  writeFileSync(
    path,
    Buffer.concat([Buffer.from(header.buffer), ...parts.map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength))]),
  );
}

/** run.c's encode(), ported as written: optional BOS (1), dummy prefix " ", code points, byte fallback, merge by best score. */
export function runcEncode(vocab: Llama2cTestVocab, text: string, bos: boolean): number[] {
  const lookup = new Map<string, number>();
  vocab.pieces.forEach((p, i) => {
    if (!lookup.has(p)) lookup.set(p, i);
  });
  const bytes = new TextEncoder().encode(text);
  const tokens: number[] = [];
  if (bos) tokens.push(1);
  if (bytes.length > 0) tokens.push(lookup.get(' ')!);
  const dec = new TextDecoder();
  let buf: number[] = [];
  for (let c = 0; c < bytes.length; c++) {
    if ((bytes[c] & 0xc0) !== 0x80) buf = [];
    buf.push(bytes[c]);
    if (c + 1 < bytes.length && (bytes[c + 1] & 0xc0) === 0x80 && buf.length < 4) continue;
    const id = lookup.get(dec.decode(Uint8Array.from(buf)));
    if (id !== undefined) tokens.push(id);
    else for (const b of buf) tokens.push(b + 3);
    buf = [];
  }
  for (;;) {
    let bestScore = -1e10;
    let bestId = -1;
    let bestIdx = -1;
    for (let i = 0; i + 1 < tokens.length; i++) {
      const id = lookup.get(vocab.pieces[tokens[i]] + vocab.pieces[tokens[i + 1]]);
      if (id !== undefined && vocab.scores[id] > bestScore) {
        bestScore = vocab.scores[id];
        bestId = id;
        bestIdx = i;
      }
    }
    if (bestIdx === -1) break;
    tokens.splice(bestIdx, 2, bestId);
  }
  return tokens;
}

// ggml's block formats as scripts/model/ggml-quants.ts writes and reads them:
// - bytes equal to ggml's own reference quantizers (ggml-quants.c quantize_row_*_ref, compiled without
//   FMA contraction) on a fixed input: the digests below are of the bytes ggml wrote for goldenInput();
// - each format's dequantisation error within its bound, and re-quantising a dequantised Q8_0 / Q4_0 /
//   Q5_0 / Q4_1 / Q5_1 row gives the same bytes (lossless repacking);
// - llama-quantize's Q4_K_M choices per tensor, row-length fallbacks included;
// - llama.cpp itself (wllama) runs files of every type and its greedy tokens equal the float64 reference's
//   on the values our dequantizer reads from the same file: a wrong block layout changes them.
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadWllama, nonUtf8TokenIds } from '../scripts/bench/wllama-node.js';
import { ggufFolderFiles } from '../scripts/import/gguf.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { dequantizeRow, quantize, type QuantType } from '../scripts/model/ggml-quants.js';
import { llamaTensors, presetGgufInput, writeLlamaGguf, type GgufFileType } from '../scripts/model/gguf-writer.js';
import { llamaConfigJson, PRESETS } from '../scripts/model/presets.js';
import { makeWeights } from '../scripts/model/weights.js';
import { GGML_TYPE, ggmlTypeName } from '../src/engine/formats/gguf/ggml-types.js';
import { readGgufHeader } from '../src/engine/formats/gguf/gguf-header.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { argmax, topGap } from './helpers/engines.js';
import { ggufWeights } from './helpers/gguf-weights.js';
import { mulberry32 } from './helpers/prng.js';
import { LlamaReference, type LlamaConfig } from './reference/llama-reference.js';

/** 4096 values in 16 blocks of 256 of four kinds: small, cubed (heavy-tailed), positive, sparse with outliers. */
function goldenInput(): Float32Array {
  const next = mulberry32(20);
  const x = new Float32Array(4096);
  for (let i = 0; i < x.length; i++) {
    const u = next() * 2 - 1;
    const kind = Math.floor(i / 256) % 4;
    x[i] = kind === 0 ? u * 0.02 : kind === 1 ? u ** 3 : kind === 2 ? Math.abs(u) + 0.5 : i % 9 ? 0 : u * 4;
  }
  return x;
}

/** SHA-256 (first 32 hex digits) of ggml's bytes for goldenInput() as rows of 1024. */
const GGML_DIGESTS: Record<Exclude<QuantType, 'F32'>, string> = {
  Q8_0: '9ef3bf968c09c1f7b4159565c438bef5',
  Q4_0: '16e420471bd38388493a1828392a233c',
  Q4_1: '458a0e6bd765073a6256e887744768bd',
  Q5_0: '2d9f96304a88b154539f6030e75b3966',
  Q5_1: '305d7109d30bb8f077a863b0ef4a769c',
  Q4_K: '9d9fc725eb588a250f08541725b5d209',
  Q5_K: '94b6baca71a4ff2ed6aac47fb02ca91e',
  Q6_K: '22c147bbc041fdbbd8bd6fe50772a4b9',
  F16: 'f109092447c3c716ec64e8cf76f94321',
  BF16: '043d4f8423020fc75a65e11a6097e900',
};

/** Largest |x - dequant(quant(x))| per 32-value block, as a fraction of the block's largest |x|. */
const ERROR_BOUND: Record<Exclude<QuantType, 'F32'>, number> = {
  Q8_0: 0.5 / 127 + 2 ** -9, // half a step, plus the f16 scale's rounding
  Q4_0: 1 / 8 + 2 ** -8, // the value opposite the largest may clamp from +8 to +7 steps
  Q5_0: 1 / 16 + 2 ** -8,
  Q4_1: 1 / 15 + 2 ** -8, // half a step of (max - min) / 15 <= 2·amax / 30
  Q5_1: 1 / 31 + 2 ** -8,
  Q4_K: 0.15, // 6-bit sub-block scales and mins on top of 4-bit values
  Q5_K: 0.08,
  Q6_K: 0.03,
  F16: 2 ** -11,
  BF16: 2 ** -8,
};

const digest = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex').slice(0, 32);

describe('ggml quantizers', () => {
  for (const [type, want] of Object.entries(GGML_DIGESTS) as [Exclude<QuantType, 'F32'>, string][]) {
    it(`${type}: bytes equal ggml's reference quantizer's, error within ${ERROR_BOUND[type].toPrecision(3)} of each block's max`, () => {
      const x = goldenInput();
      const bytes = quantize(type, x, 1024);
      expect(digest(bytes)).toBe(want);
      const y = dequantizeRow(GGML_TYPE[type], bytes, x.length);
      for (let b = 0; b < x.length; b += 32) {
        let amax = 0;
        let err = 0;
        for (let j = b; j < b + 32; j++) {
          amax = Math.max(amax, Math.abs(x[j]));
          err = Math.max(err, Math.abs(x[j] - y[j]));
        }
        expect(err).toBeLessThanOrEqual(ERROR_BOUND[type] * amax);
      }
    });
  }

  it('re-quantising a dequantised Q8_0 / Q4_0 / Q5_0 / Q4_1 / Q5_1 row gives the same bytes', () => {
    const x = goldenInput();
    for (const type of ['Q8_0', 'Q4_0', 'Q5_0', 'Q4_1', 'Q5_1'] as const) {
      const bytes = quantize(type, x);
      expect(quantize(type, dequantizeRow(GGML_TYPE[type], bytes, x.length))).toEqual(bytes);
    }
  });

  it('names the type it cannot dequantize, and refuses rows of partial blocks', () => {
    expect(() => dequantizeRow(GGML_TYPE.Q2_K, new Uint8Array(84), 256)).toThrow('cannot dequantize ggml type Q2_K');
    expect(() => quantize('Q4_K', new Float32Array(64))).toThrow('a Q4_K row holds whole blocks of 256 values, not 64');
  });
});

describe("llama-quantize's type choices", () => {
  const typesOf = (preset: 'tiny' | 'tiny-256', fileType: GgufFileType, tied = true) => {
    const shape = { ...PRESETS[preset], tieWordEmbeddings: tied };
    return new Map(llamaTensors(shape, makeWeights(shape, DEFAULT_SEED), fileType).map((t) => [t.name, t.type]));
  };

  it('Q4_K_M: Q6_K for the tied embedding and for attn_v / ffn_down of the layers use_more_bits picks', () => {
    const t = typesOf('tiny-256', 'Q4_K_M');
    expect(t.get('token_embd.weight')).toBe('Q6_K');
    // 2 layers: use_more_bits is true for layer 1 (>= 7·2/8) only.
    expect([t.get('blk.0.attn_v.weight'), t.get('blk.1.attn_v.weight')]).toEqual(['Q4_K', 'Q6_K']);
    expect([t.get('blk.0.ffn_down.weight'), t.get('blk.1.ffn_down.weight')]).toEqual(['Q4_K', 'Q6_K']);
    for (const n of ['attn_q', 'attn_k', 'attn_output', 'ffn_gate', 'ffn_up'])
      expect(t.get(`blk.0.${n}.weight`)).toBe('Q4_K');
    expect(t.get('blk.0.attn_norm.weight')).toBe('F32');
    const untied = typesOf('tiny-256', 'Q4_K_M', false);
    expect([untied.get('token_embd.weight'), untied.get('output.weight')]).toEqual(['Q4_K', 'Q6_K']);
  });

  it('falls back as llama.cpp does when rows are not whole super-blocks', () => {
    const t = typesOf('tiny', 'Q4_K_M'); // rows of 64 and 176
    expect(t.get('token_embd.weight')).toBe('Q8_0'); // the output projection of a row not a multiple of 256
    expect(t.get('blk.1.attn_v.weight')).toBe('Q8_0'); // Q6_K -> Q8_0
    expect(t.get('blk.0.attn_q.weight')).toBe('Q5_0'); // Q4_K -> Q5_0
    expect(t.get('blk.0.ffn_down.weight')).toBe('F16'); // 176 is not even a multiple of 32
    expect(typesOf('tiny', 'Q5_K').get('blk.0.attn_q.weight')).toBe('Q5_1');
    expect(typesOf('tiny', 'Q4_0').get('blk.0.ffn_down.weight')).toBe('F32');
  });
});

describe('llama.cpp runs every type the writer writes', () => {
  /** Random weights give near-ties: each type's check uses the first prompt whose first steps are firm. */
  const PROMPTS = [
    'The keeper wrote in his notebook that the barometer had fallen.',
    'People have always wanted to know what time it is.',
    'To make a simple loaf of bread you need flour, water and salt.',
    'Every Friday, when the sun went down, the market opened.',
  ];
  const STEPS = 8;
  /**
   * Below this top-1/top-2 logit gap llama.cpp may rightly choose the other token: it multiplies quantised
   * weights with activations quantised to 8 bits per block (F16 weights with f16 activations), which moves
   * these logits (std ~8) by up to a few hundredths. A wrong block layout changes the first token already.
   */
  const NEAR_TIE = 0.25;
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gguf-quants-test-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  // The layouts new here (Q8_0 and F32 have their own test in gguf-writer.test.ts; F16 and BF16 are plain).
  const types: GgufFileType[] = ['Q4_K_M', 'Q5_K', 'Q6_K', 'Q4_1', 'Q5_1', 'Q5_0'];
  for (const fileType of types) {
    it(`tiny-256 ${fileType}: llama.cpp's greedy tokens equal the reference's on our dequantised values`, {
      timeout: 180_000,
    }, async () => {
      const path = join(dir, `${fileType}.gguf`);
      const input = presetGgufInput('tiny-256', DEFAULT_SEED);
      writeLlamaGguf(path, input, fileType);
      const file = new Uint8Array(readFileSync(path));
      const { header } = await readGgufHeader(file);
      const used = new Set(header.tensors.filter((t) => t.ne.length === 2).map((t) => ggmlTypeName(t.type)));
      if (fileType !== 'Q4_K_M') expect([...used]).toEqual([fileType]);
      const folder = ggufFolderFiles(header);
      const tok = TextTokenizer.fromJson(folder.tokenizerJson, folder.tokenizerConfig);
      const shape = PRESETS['tiny-256'];
      const ref = new LlamaReference(
        llamaConfigJson(shape) as unknown as LlamaConfig,
        ggufWeights(file, header, shape),
      );
      // llama.cpp tokenizes the text prompt (as our tokenizer does: test/gguf-import.test.ts) and, with
      // ignore_eos, never picks its end-of-generation ids 0 and 2; bans keep every output whole UTF-8.
      const nonUtf8 = nonUtf8TokenIds(tok);
      const banned = new Set([...nonUtf8, 0, 2]);
      const greedyReference = (prompt: number[]): { ids: number[]; firm: number } => {
        const ids: number[] = [];
        let firm = STEPS;
        let logits = ref.forward(prompt, 0).at(-1)!;
        for (let s = 0; s < STEPS; s++) {
          const row = Float64Array.from(logits, (v, id) => (banned.has(id) ? -Infinity : v));
          ids.push(argmax(row));
          if (firm === STEPS && topGap(row) < NEAR_TIE) firm = s;
          logits = ref.forward([ids[s]], prompt.length + s)[0];
        }
        return { ids, firm };
      };
      const [text, prompt, expected] = PROMPTS.map(
        (p) => [p, tok.encode(p), greedyReference(tok.encode(p))] as const,
      ).find(([, , r]) => r.firm >= 3)!;
      const firm = expected.firm;
      const w = await loadWllama(path, { cache_type_k: 'f32', cache_type_v: 'f32' });
      try {
        const got = await w.greedy(text, STEPS, { bannedIds: nonUtf8 });
        expect(got.promptTokens).toBe(prompt.length);
        expect(got.ids.slice(0, firm)).toEqual(expected.ids.slice(0, firm));
      } finally {
        await w.exit();
      }
    });
  }
});

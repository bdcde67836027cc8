// The GGUF writer (scripts/model/gguf-writer.ts), checked two ways:
// - its bytes, read back with a small GGUF reader written here apart from the writer: header, metadata,
//   tensor table, alignment, the transposed and RoPE-permuted matrices, and the Q8_0/Q4_0 blocks;
// - llama.cpp itself: the file for `tiny` loads in @wllama/wllama (llama.cpp's WebAssembly build) and its
//   greedy tokens equal the float64 reference's on our ONNX file. A wrong Q/K permutation, transpose or
//   tokenizer table changes them.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadWllama, nonUtf8TokenIds } from '../scripts/bench/wllama-node.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { quantizeQ4_0, quantizeQ8_0 } from '../scripts/model/ggml-quants.js';
import { halfValue } from '../src/engine/model/half.js';
import { presetGgufInput, writeLlamaGguf, type GgufType } from '../scripts/model/gguf-writer.js';
import { PRESETS } from '../scripts/model/presets.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { argmax, modelDir, topGap } from './helpers/engines.js';
import { loadReference } from './reference/load-reference.js';
import { readOnnxWeights } from './reference/onnx-weights.js';

// ------------------------------------------------------------------------------------------------
// A minimal GGUF v3 reader (the test's own, so writer bugs are not mirrored).

interface ReadTensor {
  name: string;
  ne: number[];
  type: number;
  offset: number;
}

function readGguf(bytes: Uint8Array): { meta: Map<string, unknown>; tensors: ReadTensor[]; dataStart: number } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let pos = 0;
  /** Moves past the next n bytes and returns where they start. */
  const skip = (n: number): number => {
    pos += n;
    return pos - n;
  };
  const u32 = (): number => view.getUint32(skip(4), true);
  const u64 = (): number => Number(view.getBigUint64(skip(8), true));
  const str = (): string => {
    const n = u64();
    const at = skip(n);
    return new TextDecoder().decode(bytes.subarray(at, at + n));
  };
  const value = (type: number): unknown => {
    switch (type) {
      case 4:
        return u32();
      case 5:
        return view.getInt32(skip(4), true);
      case 6:
        return view.getFloat32(skip(4), true);
      case 7:
        return bytes[pos++] === 1;
      case 8:
        return str();
      case 9: {
        const t = u32();
        return Array.from({ length: u64() }, () => value(t));
      }
      default:
        throw new Error(`metadata type ${type} not expected from the writer`);
    }
  };
  expect(u32()).toBe(0x46554747); // "GGUF"
  expect(u32()).toBe(3);
  const nTensors = u64();
  const nMeta = u64();
  const meta = new Map<string, unknown>();
  for (let i = 0; i < nMeta; i++) {
    const key = str();
    meta.set(key, value(u32()));
  }
  const tensors: ReadTensor[] = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str();
    const ne = Array.from({ length: u32() }, () => u64());
    tensors.push({ name, ne, type: u32(), offset: u64() });
  }
  const alignment = (meta.get('general.alignment') as number | undefined) ?? 32;
  return { meta, tensors, dataStart: Math.ceil(pos / alignment) * alignment };
}

function f32Data(bytes: Uint8Array, dataStart: number, t: ReadTensor): Float32Array {
  const n = t.ne.reduce((a, b) => a * b, 1);
  // A copy (Buffer#slice would share the file's ArrayBuffer), so the floats start at byte 0.
  return new Float32Array(
    Uint8Array.prototype.slice.call(bytes, dataStart + t.offset, dataStart + t.offset + 4 * n).buffer,
  );
}

/** ggml's dequantisation, written from the block layout. */
function dequantize(type: 'Q8_0' | 'Q4_0', blocks: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  const size = type === 'Q8_0' ? 34 : 18;
  for (let b = 0; b < n / 32; b++) {
    const o = b * size;
    const d = halfValue(blocks[o] | (blocks[o + 1] << 8));
    for (let j = 0; j < 32; j++) {
      if (type === 'Q8_0') out[b * 32 + j] = d * ((blocks[o + 2 + j] << 24) >> 24);
      else out[b * 32 + j] = d * (j < 16 ? (blocks[o + 2 + j] & 15) - 8 : (blocks[o + 2 + j - 16] >> 4) - 8);
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------------

let dir: string;
const ggufPath = (preset: string, type: GgufType): string => join(dir, `${preset}-${type}.gguf`);

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'gguf-writer-test-'));
  for (const preset of ['tiny', 'tiny-untied'] as const) {
    const input = presetGgufInput(preset, DEFAULT_SEED);
    for (const type of ['F32', 'Q8_0', 'Q4_0'] as const) writeLlamaGguf(ggufPath(preset, type), input, type);
  }
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('GGUF layout', () => {
  it('writes llama metadata, the tokenizer padded to vocab_size, and aligned tensors', () => {
    const p = PRESETS.tiny;
    const { meta, tensors } = readGguf(readFileSync(ggufPath('tiny', 'F32')));
    expect(meta.get('general.architecture')).toBe('llama');
    expect(meta.get('llama.block_count')).toBe(p.numLayers);
    expect(meta.get('llama.attention.head_count_kv')).toBe(p.numKvHeads);
    expect(meta.get('llama.rope.dimension_count')).toBe(p.headDim);
    const tokens = meta.get('tokenizer.ggml.tokens') as string[];
    expect(tokens).toHaveLength(p.vocabSize);
    expect(tokens.slice(0, 3)).toEqual(['<|endoftext|>', '<|im_start|>', '<|im_end|>']);
    expect((meta.get('tokenizer.ggml.token_type') as number[]).slice(0, 4)).toEqual([3, 3, 3, 1]);
    // tiny ties its embeddings: no output.weight, llama.cpp reuses token_embd.
    expect(tensors.map((t) => t.name)).toEqual([
      'token_embd.weight',
      ...Array.from({ length: p.numLayers }, (_, i) =>
        ['attn_norm', 'attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_norm', 'ffn_gate', 'ffn_up', 'ffn_down'].map(
          (n) => `blk.${i}.${n}.weight`,
        ),
      ).flat(),
      'output_norm.weight',
    ]);
    for (const t of tensors) expect(t.offset % 32).toBe(0);
    expect(tensors.find((t) => t.name === 'blk.0.ffn_down.weight')!.ne).toEqual([p.intermediateSize, p.hiddenSize]);
    const untied = readGguf(readFileSync(ggufPath('tiny-untied', 'F32'))).tensors;
    expect(untied.at(-1)).toMatchObject({ name: 'output.weight', ne: [p.hiddenSize, p.vocabSize] });
  });

  it('stores matrices as HF (out, in) rows, with q/k rows permuted per head for interleaved RoPE', () => {
    const p = PRESETS.tiny;
    const bytes = readFileSync(ggufPath('tiny', 'F32'));
    const { tensors, dataStart } = readGguf(bytes);
    const onnx = readOnnxWeights(new Uint8Array(readFileSync(join(modelDir('tiny'), 'onnx', 'model.onnx'))));
    const H = p.hiddenSize;
    const D = p.headDim;
    const check = (ggufName: string, onnxName: string, heads?: number): void => {
      const g = f32Data(bytes, dataStart, tensors.find((t) => t.name === ggufName)!);
      const w = onnx.get(onnxName)!; // MatMul (in, out)
      const [nIn, nOut] = w.dims;
      for (let row = 0; row < nOut; row++) {
        // GGUF row `row` of head h at in-head index 2i + j holds HF output row h*D + j*D/2 + i.
        const h = Math.floor(row / D);
        const r = row % D;
        const src = heads === undefined ? row : h * D + (r % 2) * (D / 2) + (r >> 1);
        for (let c = 0; c < nIn; c++) expect(g[row * nIn + c]).toBe(w.data[c * nOut + src]);
      }
    };
    check('blk.1.attn_q.weight', 'model.layers.1.self_attn.q_proj.weight', p.numHeads);
    check('blk.1.attn_k.weight', 'model.layers.1.self_attn.k_proj.weight', p.numKvHeads);
    check('blk.1.attn_v.weight', 'model.layers.1.self_attn.v_proj.weight');
    check('blk.0.ffn_down.weight', 'model.layers.0.mlp.down_proj.weight');
    const emb = f32Data(bytes, dataStart, tensors[0]);
    expect(emb.subarray(5 * H, 6 * H)).toEqual(onnx.get('model.embed_tokens.weight')!.data.subarray(5 * H, 6 * H));
  });

  it('quantises rows of 32 as ggml does, and keeps rows that are not a multiple of 32 in F32', () => {
    for (const type of ['Q8_0', 'Q4_0'] as const) {
      const { tensors } = readGguf(readFileSync(ggufPath('tiny', type)));
      const byName = new Map(tensors.map((t) => [t.name, t.type]));
      const id = type === 'Q8_0' ? 8 : 2;
      expect(byName.get('token_embd.weight')).toBe(id);
      expect(byName.get('blk.0.attn_q.weight')).toBe(id);
      expect(byName.get('blk.0.ffn_down.weight')).toBe(0); // 176 inputs per row
      expect(byName.get('blk.0.attn_norm.weight')).toBe(0);
    }
    // One block with a known answer: the largest magnitude (-4) maps to -8 in Q4_0 (d = 0.5), to -127 in Q8_0.
    const x = Float32Array.from({ length: 32 }, (_, j) => (j === 20 ? -4 : (j % 8) * 0.5 - 2));
    const q4 = new Uint8Array(18);
    quantizeQ4_0(x, q4);
    expect(halfValue(q4[0] | (q4[1] << 8))).toBe(0.5);
    expect(q4[2 + 4] & 15).toBe(((4 % 8) * 0.5 - 2) / 0.5 + 8); // element 4 in the low nibble of byte 4
    expect(q4[2 + 4] >> 4).toBe(0); // element 20 = -4 -> -8 + 8 in the high nibble
    expect(dequantize('Q4_0', q4, 32)).toEqual(x);
    const q8 = new Uint8Array(34);
    quantizeQ8_0(x, q8);
    expect((q8[2 + 20] << 24) >> 24).toBe(-127);
    const back = dequantize('Q8_0', q8, 32);
    for (let j = 0; j < 32; j++) expect(Math.abs(back[j] - x[j])).toBeLessThanOrEqual(4 / 127 / 2 + 1e-3);
  });
});

describe('llama.cpp (wllama) runs the written GGUF', () => {
  const PROMPT = 'The quick brown fox jumps over the lazy dog.';
  const STEPS = 24;

  /**
   * The float64 reference's greedy tokens over our ONNX file, never choosing a banned id, and how many of
   * them are firm: greedy decisions up to the first near-tie (top-2 gap under NEAR_TIE), where float32
   * rounding in llama.cpp may rightly pick the other token and the two runs part ways.
   */
  const NEAR_TIE = 0.01;
  async function referenceGreedy(
    model: string,
    prompt: number[],
    banned: ReadonlySet<number>,
  ): Promise<{ ids: number[]; firm: number }> {
    const ref = await loadReference(modelDir(model));
    const ids: number[] = [];
    let firm = -1;
    let logits = ref.forward(prompt, 0).at(-1)!;
    for (let s = 0; s < STEPS; s++) {
      const row = Float64Array.from(logits, (v, id) => (banned.has(id) ? -Infinity : v));
      ids.push(argmax(row));
      if (firm < 0 && topGap(row) < NEAR_TIE) firm = s;
      if (s + 1 < STEPS) logits = ref.forward([ids[s]], prompt.length + s)[0];
    }
    return { ids, firm: firm < 0 ? STEPS : firm };
  }

  function tokenizerOf(model: string): { tok: TextTokenizer; banned: number[] } {
    const read = (f: string): unknown => JSON.parse(readFileSync(join(modelDir(model), f), 'utf8'));
    const tok = TextTokenizer.fromJson(read('tokenizer.json'), read('tokenizer_config.json'));
    return { tok, banned: nonUtf8TokenIds(tok) };
  }

  for (const model of ['tiny', 'tiny-untied']) {
    it(`${model} F32: same prompt tokens and the same greedy tokens as the reference`, async () => {
      const { tok, banned } = tokenizerOf(model);
      const prompt = tok.encode(PROMPT);
      // ignore_eos bans the end-of-generation ids in llama.cpp; the reference must skip them too.
      const expected = await referenceGreedy(model, prompt, new Set([...banned, ...tok.eosTokenIds]));
      // tiny: all 24 steps are firm; tiny-untied meets a near-tie (gap 0.004) at step 9.
      expect(expected.firm).toBeGreaterThanOrEqual(8);
      // f32 KV: llama.cpp's default f16 cache would round K and V.
      const w = await loadWllama(ggufPath(model, 'F32'), { cache_type_k: 'f32', cache_type_v: 'f32' });
      try {
        const got = await w.greedy(PROMPT, STEPS, { bannedIds: banned });
        expect(got.promptTokens).toBe(prompt.length);
        expect(got.ids.slice(0, expected.firm)).toEqual(expected.ids.slice(0, expected.firm));
      } finally {
        await w.exit();
      }
    });
  }

  it('tiny Q8_0 and Q4_0 load and decode', async () => {
    const { banned } = tokenizerOf('tiny');
    for (const type of ['Q8_0', 'Q4_0'] as const) {
      const w = await loadWllama(ggufPath('tiny', type));
      try {
        const got = await w.greedy(PROMPT, 8, { bannedIds: banned });
        expect(got.ids).toHaveLength(8);
      } finally {
        await w.exit();
      }
    }
  });
});

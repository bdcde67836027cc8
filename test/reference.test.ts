// Tests for the reference forward pass (test/reference/*): the protobuf reader on hand-encoded bytes,
// the reference's own prefill/decode consistency, and parity with onnxruntime-node on generated models.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, describe, expect, it } from 'vitest';
import { argmax, LlamaReference, type LlamaConfig } from './reference/llama-reference';
import { loadReference } from './reference/load-reference';
import { PbReader, readOnnxWeights, readOtherInitializers, type Tensor } from './reference/onnx-weights';
import { mulberry32 } from './helpers/prng.js';

// ---------------------------------------------------------------------------------------------
// Hand encoding of protobuf bytes (independent of scripts/model/onnx-proto-writer.ts).

function varint(v: bigint | number): number[] {
  let x = BigInt.asUintN(64, BigInt(v));
  const out: number[] = [];
  while (x >= 0x80n) {
    out.push(Number(x & 0x7fn) | 0x80);
    x >>= 7n;
  }
  out.push(Number(x));
  return out;
}
const tag = (field: number, wire: number) => varint((field << 3) | wire);
const vField = (field: number, v: bigint | number) => [...tag(field, 0), ...varint(v)];
const lenField = (field: number, bytes: number[]) => [...tag(field, 2), ...varint(bytes.length), ...bytes];
const str = (s: string) => [...new TextEncoder().encode(s)];
const f32le = (xs: number[]) => [...new Uint8Array(Float32Array.from(xs).buffer)];

describe('onnx-weights protobuf reader', () => {
  it('reads varints past 2^31, 2^53 and negative int64', () => {
    const bytes = Uint8Array.from([
      ...varint(3_000_000_000), // > 2^31
      ...varint(2n ** 40n + 5n),
      ...varint(-1), // 10 bytes
      ...varint(2n ** 63n + 7n), // needs bigint
    ]);
    const r = new PbReader(bytes);
    expect(r.varint()).toBe(3_000_000_000);
    expect(r.varint()).toBe(2 ** 40 + 5);
    expect(r.varint()).toBe(-1);
    expect(r.varintBig()).toBe(2n ** 63n + 7n);
    expect(r.done()).toBe(true);
    expect(() => new PbReader(Uint8Array.from([0x80, 0x80])).varint()).toThrow(/truncated/);
  });

  it('extracts float initializers, packed/unpacked dims and float_data, skipping unknown fields', () => {
    const a = [1.5, -2, 3.25, 0, 1e-3, -7]; // dims [2, 3], raw_data
    const tensorA = [
      ...lenField(1, [...varint(2), ...varint(3)]), // packed dims
      ...vField(2, 1),
      ...lenField(8, str('a')),
      ...vField(12, 2n ** 35n), // unknown varint field inside TensorProto
      ...lenField(9, f32le(a)),
    ];
    const tensorB = [
      ...lenField(8, str('b.unpacked')),
      ...vField(1, 1), // dims unpacked: [1, 2]
      ...vField(1, 2),
      ...tag(4, 5),
      ...f32le([0.5]), // float_data unpacked (fixed32 each)
      ...tag(4, 5),
      ...f32le([-0.25]),
      ...vField(2, 1),
    ];
    const tensorC = [
      ...vField(2, 1),
      ...vField(1, 2),
      ...lenField(4, f32le([10, 20])), // float_data packed
      ...lenField(8, str('c.packed')),
    ];
    const tensorInt = [
      ...lenField(1, [...varint(3_000_000_000), ...varint(-1)]), // dims past 2^31 and negative
      ...vField(2, 7), // INT64: not a float tensor
      ...lenField(8, str('shape')),
      ...lenField(9, [1, 2, 3]),
    ];
    const graph = [
      ...lenField(1, lenField(1, str('node_input'))), // NodeProto: skipped
      ...lenField(2, str('graph-name')),
      ...lenField(5, tensorA),
      ...tag(9, 1),
      1,
      2,
      3,
      4,
      5,
      6,
      7,
      8, // unknown fixed64
      ...lenField(5, tensorB),
      ...tag(10, 5),
      9,
      9,
      9,
      9, // unknown fixed32
      ...tag(11, 3),
      ...vField(1, 5),
      ...lenField(2, [7, 7]),
      ...tag(11, 4), // unknown group
      ...lenField(5, tensorC),
      ...lenField(5, tensorInt),
    ];
    const model = Uint8Array.from([
      ...vField(1, 8), // ir_version
      ...lenField(2, str('producer')),
      ...vField(99, 2n ** 62n), // unknown, large tag number and value
      ...lenField(8, [...lenField(1, []), ...vField(2, 17)]), // opset_import
      ...lenField(7, graph),
      ...lenField(14, str('trailing metadata')),
    ]);
    // Offset the model inside a bigger buffer: raw_data is then unaligned and byteOffset != 0.
    const backing = new Uint8Array(model.length + 3);
    backing.set(model, 3);
    const w = readOnnxWeights(backing.subarray(3));

    expect([...w.keys()]).toEqual(['a', 'b.unpacked', 'c.packed']);
    expect(w.get('a')!.dims).toEqual([2, 3]);
    expect([...w.get('a')!.data]).toEqual([...Float32Array.from(a)]);
    expect(w.get('b.unpacked')).toEqual({ dims: [1, 2], data: Float32Array.from([0.5, -0.25]) });
    expect(w.get('c.packed')).toEqual({ dims: [2], data: Float32Array.from([10, 20]) });

    const other = readOtherInitializers(backing.subarray(3));
    expect(other.get('shape')!.dims).toEqual([3_000_000_000, -1]);
    expect(other.get('shape')!.dataType).toBe(7);
    expect([...other.get('shape')!.rawData]).toEqual([1, 2, 3]);
  });

  it('rejects a float tensor whose data does not match its dims', () => {
    const bad = [...vField(1, 3), ...vField(2, 1), ...lenField(8, str('x')), ...lenField(9, f32le([1, 2]))];
    const model = Uint8Array.from(lenField(7, lenField(5, bad)));
    expect(() => readOnnxWeights(model)).toThrow(/dims/);
  });
});

// ---------------------------------------------------------------------------------------------
// Reference consistency on hand-made random weights (no ONNX file involved).

function tinyConfig(tied: boolean): LlamaConfig {
  return {
    hidden_size: 64,
    intermediate_size: 176,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    vocab_size: 512,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: tied,
  };
}

function randomWeights(c: LlamaConfig, seed: number): Map<string, Tensor> {
  const rnd = mulberry32(seed);
  const m = new Map<string, Tensor>();
  const put = (name: string, dims: number[], scale: number, offset = 0) => {
    const n = dims.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = offset + (rnd() * 2 - 1) * scale;
    m.set(name, { dims, data });
  };
  const H = c.hidden_size,
    I = c.intermediate_size,
    D = c.head_dim!;
  const Q = c.num_attention_heads * D,
    KV = c.num_key_value_heads * D;
  put('model.embed_tokens.weight', [c.vocab_size, H], 1);
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    put(`${p}input_layernorm.weight`, [H], 0.1, 1);
    put(`${p}self_attn.q_proj.weight`, [H, Q], 0.3);
    put(`${p}self_attn.k_proj.weight`, [H, KV], 0.3);
    put(`${p}self_attn.v_proj.weight`, [H, KV], 0.2);
    put(`${p}self_attn.o_proj.weight`, [Q, H], 0.2);
    put(`${p}post_attention_layernorm.weight`, [H], 0.1, 1);
    put(`${p}mlp.gate_proj.weight`, [H, I], 0.2);
    put(`${p}mlp.up_proj.weight`, [H, I], 0.2);
    put(`${p}mlp.down_proj.weight`, [I, H], 0.1);
  }
  put('model.norm.weight', [H], 0.1, 1);
  if (!c.tie_word_embeddings) put('lm_head.weight', [H, c.vocab_size], 1);
  return m;
}

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
};

describe('LlamaReference consistency', () => {
  for (const tied of [true, false]) {
    it(`prefill of N == prefill of 1 + N-1 single steps (${tied ? 'tied' : 'untied'})`, () => {
      const c = tinyConfig(tied);
      const ref = new LlamaReference(c, randomWeights(c, 7));
      const prompt = [1, 17, 300, 42, 42, 511, 0, 99, 250, 3];
      const all = ref.forward(prompt, 0);
      expect(all.length).toBe(prompt.length);
      expect(ref.length).toBe(prompt.length);

      const stepwise = new LlamaReference(c, randomWeights(c, 7));
      const one = [...stepwise.forward([prompt[0]], 0)];
      for (let i = 1; i < prompt.length; i++) one.push(...stepwise.forward([prompt[i]], i));
      for (let i = 0; i < prompt.length; i++) expect(maxAbsDiff(all[i], one[i])).toBeLessThan(1e-9);
      expect(ref.logits).toBe(all[all.length - 1]);

      // Rewinding to a shorter prefix recomputes the same logits.
      const again = ref.forward(prompt.slice(4), 4);
      for (let i = 0; i < again.length; i++) expect(maxAbsDiff(again[i], all[i + 4])).toBeLessThan(1e-9);
      expect(() => ref.forward([5], ref.length + 1)).toThrow(/past cache/);
    });
  }

  it('tiny: 32 greedy steps run well under a second', () => {
    const c = tinyConfig(true);
    const ref = new LlamaReference(c, randomWeights(c, 3));
    const t0 = performance.now();
    const toks = ref.greedy([1, 2, 3, 4], 32);
    const ms = performance.now() - t0;
    expect(toks.length).toBe(32);
    expect(ms).toBeLessThan(1000);
  });

  it('GQA: query head h reads kv head floor(h / (heads/kv_heads))', () => {
    const c = tinyConfig(true);
    const w = randomWeights(c, 5);
    // Same model with kv_heads = heads, kv columns duplicated so head h gets kv head floor(h / 2).
    const full: LlamaConfig = { ...c, num_key_value_heads: c.num_attention_heads };
    const wFull = new Map(w);
    const H = c.hidden_size,
      D = c.head_dim!,
      heads = c.num_attention_heads,
      group = heads / c.num_key_value_heads;
    for (let l = 0; l < c.num_hidden_layers; l++) {
      for (const name of ['k_proj', 'v_proj']) {
        const key = `model.layers.${l}.self_attn.${name}.weight`;
        const src = w.get(key)!.data; // (hidden, kv_heads*head_dim)
        const dst = new Float32Array(H * heads * D); // (hidden, heads*head_dim)
        for (let i = 0; i < H; i++) {
          for (let h = 0; h < heads; h++) {
            for (let d = 0; d < D; d++) {
              dst[i * heads * D + h * D + d] = src[i * c.num_key_value_heads * D + Math.floor(h / group) * D + d];
            }
          }
        }
        wFull.set(key, { dims: [H, heads * D], data: dst });
      }
    }
    const prompt = [1, 9, 80, 160, 320];
    const a = new LlamaReference(c, w).forward(prompt, 0);
    const b = new LlamaReference(full, wFull).forward(prompt, 0);
    for (let i = 0; i < prompt.length; i++) expect(maxAbsDiff(a[i], b[i])).toBeLessThan(1e-12);
  });

  it('position 0 attends only to itself, so its logits do not depend on later tokens', () => {
    const c = tinyConfig(false);
    const ref = new LlamaReference(c, randomWeights(c, 11));
    const a = ref.forward([5, 6, 7], 0)[0];
    const b = ref.forward([5, 200, 300], 0)[0];
    expect(maxAbsDiff(a, b)).toBe(0);
  });
});

// ---------------------------------------------------------------------------------------------
// Parity with a raw onnxruntime-node session over the generated fp32 model.

const GENERATOR = join(import.meta.dirname, '..', 'scripts', 'model-make.ts');

/** Drives onnx/model.onnx by hand: explicit masks, positions and past/present KV tensors. */
class OrtRunner {
  private past: Record<string, ort.Tensor> = {};
  private pastLen = 0;
  constructor(
    private readonly session: ort.InferenceSession,
    private readonly c: LlamaConfig,
  ) {
    const D = c.head_dim ?? c.hidden_size / c.num_attention_heads;
    for (let l = 0; l < c.num_hidden_layers; l++) {
      for (const kind of ['key', 'value']) {
        // (batch, kv_heads, past=0, head_dim)
        this.past[`past_key_values.${l}.${kind}`] = new ort.Tensor('float32', new Float32Array(0), [
          1,
          c.num_key_value_heads,
          0,
          D,
        ]);
      }
    }
  }

  /** Returns logits (seq, vocab) as rows. */
  async run(tokens: number[]): Promise<Float32Array[]> {
    const S = tokens.length;
    const T = this.pastLen + S;
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(tokens.map(BigInt)), [1, S]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(T).fill(1n), [1, T]),
      position_ids: new ort.Tensor('int64', BigInt64Array.from(tokens.map((_, i) => BigInt(this.pastLen + i))), [1, S]),
      ...this.past,
    };
    const out = await this.session.run(feeds);
    const V = this.c.vocab_size;
    const logits = out.logits; // (1, seq, vocab)
    expect(logits.dims).toEqual([1, S, V]);
    for (let l = 0; l < this.c.num_hidden_layers; l++) {
      for (const kind of ['key', 'value']) {
        const present = out[`present.${l}.${kind}`]; // (1, kv_heads, T, head_dim)
        expect(present.dims[2]).toBe(T);
        this.past[`past_key_values.${l}.${kind}`] = present;
      }
    }
    this.pastLen = T;
    const data = logits.data as Float32Array;
    return tokens.map((_, i) => data.slice(i * V, (i + 1) * V));
  }
}

function top2Gap(v: ArrayLike<number>): number {
  const best = argmax(v);
  let second = -Infinity;
  for (let i = 0; i < v.length; i++) if (i !== best && v[i] > second) second = v[i];
  return v[best] - second;
}

describe('reference vs onnxruntime-node on generated fp32 models', () => {
  const root = mkdtempSync(join(tmpdir(), 'ref-parity-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  for (const preset of ['tiny', 'tiny-untied'] as const) {
    it(`${preset}: prefill + 32 greedy decode steps match`, async () => {
      // Loaded lazily: a generator failure then fails only these tests, not the reader/consistency ones.
      const { makeModel } = (await import(/* @vite-ignore */ GENERATOR)) as typeof import('../scripts/model-make');
      const dir = join(root, preset);
      makeModel({ preset, outDir: dir, seed: 42, dtypes: ['fp32'] });
      const ref = await loadReference(dir);
      const session = await ort.InferenceSession.create(join(dir, 'onnx', 'model.onnx'));
      const runner = new OrtRunner(session, readConfig(ref));

      const prompt = [1, 45, 300, 12, 77, 401, 9, 250];
      let maxDiff = 0;
      let minGap = Infinity;
      const refRows = ref.forward(prompt, 0);
      const ortRows = await runner.run(prompt);
      for (let i = 0; i < prompt.length; i++) maxDiff = Math.max(maxDiff, maxAbsDiff(refRows[i], ortRows[i]));
      expect(maxDiff).toBeLessThan(1e-4);

      const tokens: number[] = [];
      let refLast = refRows[refRows.length - 1];
      let ortLast = ortRows[ortRows.length - 1];
      for (let s = 0; s < 32; s++) {
        const next = argmax(refLast);
        expect(argmax(ortLast)).toBe(next);
        minGap = Math.min(minGap, top2Gap(refLast));
        tokens.push(next);
        refLast = ref.forward([next], prompt.length + s)[0];
        ortLast = (await runner.run([next]))[0];
        const d = maxAbsDiff(refLast, ortLast);
        maxDiff = Math.max(maxDiff, d);
        expect(d, `step ${s}`).toBeLessThan(1e-4);
      }
      minGap = Math.min(minGap, top2Gap(refLast));
      expect(new Set(tokens).size).toBeGreaterThan(1); // SPEC: greedy output is not one repeated token
      console.log(
        `[reference parity] ${preset}: max |ref - ort| logit = ${maxDiff.toExponential(3)}, ` +
          `min top1-top2 gap = ${minGap.toFixed(4)}, tokens = ${tokens.join(' ')}`,
      );
      await session.release();
    });
  }
});

function readConfig(ref: LlamaReference): LlamaConfig {
  return {
    hidden_size: ref.hidden,
    intermediate_size: ref.inter,
    num_hidden_layers: ref.nLayers,
    num_attention_heads: ref.heads,
    num_key_value_heads: ref.kvHeads,
    head_dim: ref.headDim,
    vocab_size: ref.vocab,
    rms_norm_eps: ref.eps,
    rope_theta: ref.theta,
    tie_word_embeddings: ref.tied,
  };
}

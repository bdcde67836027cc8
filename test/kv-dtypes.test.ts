// The KV pool's element types on the edge kernels (KV_DTYPE): fp16 and int8 hold more tokens in the same
// bytes; each stays batch- and prefix-invariant, and its logits follow the reference that rounds its cache
// the same way. onnxruntime keeps float32 and refuses the others by name.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { edgeKernelsModule } from '../src/backends/edge-kernels-node.js';
import type { Engine } from '../src/engine/engine.js';
import { instantiateKernels } from '../src/engine/runners/wasm/edge-kernels.js';
import type { KvDtype } from '../src/engine/kv/kv-dtype.js';
import { loadReference } from './reference/load-reference.js';
import type { LlamaReference } from './reference/llama-reference.js';
import { int8Row } from './helpers/attention-kernels.js';
import { collect, loadEngine, maxAbsDiff, modelDir, randomIds } from './helpers/engines.js';
import { mulberry32 } from './helpers/prng.js';

const bits = (a: Float32Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');
const POOL = 1 << 20;

/** Each row (a fresh sequence prefilled with its tokens) in one pass: the rows' last logits; frees them. */
async function lastLogits(engine: Engine, rows: number[][]): Promise<Float32Array[]> {
  const kvs = rows.map(() => engine.kv.create());
  for (const [i, r] of rows.entries()) engine.kv.reserve(kvs[i], r.length);
  const out = await engine.runner.forward(rows.map((tokens, i) => ({ kv: kvs[i], tokens })));
  const logits = rows.map((_, i) => out.last(i).slice());
  for (const kv of kvs) engine.kv.free(kv);
  return logits;
}

/** `prompt`'s logits in a pass of its own, then its first half cached and the rest in a batch of others. */
async function alonePrefixedAndBatched(engine: Engine, prompt: number[]): Promise<Float32Array[]> {
  const [alone] = await lastLogits(engine, [prompt]);
  const kv = engine.kv.create();
  const half = prompt.length >> 1;
  engine.kv.reserve(kv, half);
  await engine.runner.forward([{ kv, tokens: prompt.slice(0, half) }]);
  const other = engine.kv.create();
  engine.kv.reserve(kv, prompt.length - half);
  engine.kv.reserve(other, 9);
  const out = await engine.runner.forward([
    { kv: other, tokens: randomIds(9, 13, 3, 400) },
    { kv, tokens: prompt.slice(half) },
  ]);
  const prefixed = out.last(1).slice();
  engine.kv.free(kv);
  engine.kv.free(other);
  const [, batched] = await lastLogits(engine, [randomIds(5, 14, 3, 400), prompt, [5]]);
  return [alone, prefixed, batched];
}

/** The reference's logits for `prompt` with its cache rounded as `dtype` rounds it (fp16 is not modelled). */
function referenceLogits(ref: LlamaReference, prompt: number[], int8: boolean): Float64Array {
  ref.kvInt8 = int8;
  ref.reset();
  ref.forward(prompt, 0);
  return ref.logits;
}

describe('KV_DTYPE on the edge kernels', () => {
  let full: Engine;
  let ref: LlamaReference;
  const engines: Engine[] = [];
  const prompt = randomIds(24, 40, 3, 400);
  beforeAll(async () => {
    full = await loadEngine('kernels', 'tiny', { autoRun: false, kvCacheBytes: POOL });
    engines.push(full);
    ref = await loadReference(modelDir('tiny'));
  });
  afterAll(() => Promise.all(engines.map((e) => e.runner.release())));

  const load = async (kvDtype: KvDtype): Promise<Engine> => {
    const engine = await loadEngine('kernels', 'tiny', { autoRun: false, kvDtype, kvCacheBytes: POOL });
    engines.push(engine);
    return engine;
  };

  it('fp16 holds twice the tokens, stays invariant and keeps the reference greedy tokens', async () => {
    const half = await load('fp16');
    expect(half.kv.pool.numBlocks).toBe(2 * full.kv.pool.numBlocks);
    expect(half.stats().kv.bytesPerToken * 2).toBe(full.stats().kv.bytesPerToken);
    const [alone, prefixed, batched] = await alonePrefixedAndBatched(half, prompt);
    expect(bits(prefixed)).toBe(bits(alone));
    expect(bits(batched)).toBe(bits(alone));
    // Keys and values rounded to half precision move logits a little, and not the greedy choice.
    const [exact] = await lastLogits(full, [prompt]);
    const worst = maxAbsDiff(exact, alone);
    expect(worst).toBeGreaterThan(0);
    expect(worst).toBeLessThan(0.05);
    const request = { prompt_ids: prompt, max_tokens: 24, temperature: 0, ignore_eos: true };
    const auto = await loadEngine('kernels', 'tiny', { kvDtype: 'fp16' });
    engines.push(auto);
    ref.kvInt8 = false;
    expect((await collect(auto, request)).done.tokenIds).toEqual(ref.greedy(prompt, 24));
  });

  it('int8 holds (4 x head_dim) / (head_dim + 4) times the tokens of fp32, and stays invariant', async () => {
    const int8 = await load('int8');
    const { numLayers, numKvHeads, headDim } = int8.config;
    expect(int8.stats().kv.bytesPerToken).toBe(2 * numLayers * numKvHeads * (headDim + 4));
    const ratio = (4 * headDim) / (headDim + 4);
    expect(int8.kv.pool.numBlocks).toBeGreaterThanOrEqual(Math.floor(ratio * full.kv.pool.numBlocks) - 1);
    const [alone, prefixed, batched] = await alonePrefixedAndBatched(int8, prompt);
    expect(bits(prefixed)).toBe(bits(alone));
    expect(bits(batched)).toBe(bits(alone));
  });

  it("int8 logits follow the reference's 8-bit cache far closer than its exact one", async () => {
    const int8 = await load('int8');
    const [ours] = await lastLogits(int8, [prompt]);
    const [exact] = await lastLogits(full, [prompt]);
    const toRounded = maxAbsDiff(ours, referenceLogits(ref, prompt, true));
    const toExact = maxAbsDiff(ours, referenceLogits(ref, prompt, false));
    // The fp32 engine against the exact reference: float32 against float64 arithmetic.
    const floor = maxAbsDiff(exact, referenceLogits(ref, prompt, false));
    expect(toExact).toBeGreaterThan(10 * floor); // the cache is rounded, visibly
    expect(toRounded).toBeLessThan(4 * floor + 1e-4); // and rounded exactly as the reference says
  });

  it('int8 decodes the same greedy tokens alone and beside other streams', async () => {
    const engine = await loadEngine('kernels', 'tiny', { kvDtype: 'int8' });
    engines.push(engine);
    const request = { prompt_ids: prompt, max_tokens: 24, temperature: 0, ignore_eos: true };
    const alone = (await collect(engine, request)).done.tokenIds;
    const others = [1, 2, 3].map((i) => collect(engine, { ...request, prompt_ids: randomIds(10 + i, 50 + i, 3, 400) }));
    const [together] = await Promise.all([collect(engine, request), ...others]);
    expect(together.done.tokenIds).toEqual(alone);
  });

  it('fp16 and int8 are refused by name on onnxruntime, which keeps float32', async () => {
    for (const kvDtype of ['fp16', 'int8'] as const)
      await expect(loadEngine('cpu', 'tiny', { kvDtype })).rejects.toThrow(
        new RegExp(`${kvDtype} KV cache needs the edge kernels`),
      );
  });

  it('an unknown KV_DTYPE is refused, naming the ones there are', async () => {
    await expect(loadEngine('kernels', 'tiny', { kvDtype: 'int4' as KvDtype })).rejects.toThrow(
      /must be fp32, fp16, int8, got "int4"/,
    );
  });
});

/** One (token, head) row as the 8-bit pool stores it: its bytes, then its scale. */
function int8RowBytes(x: Float32Array): Uint8Array {
  const { q, scale } = int8Row(x);
  const out = new Uint8Array(x.length + 4);
  for (const [d, v] of q.entries()) out[d] = v & 0xff;
  new DataView(out.buffer).setFloat32(x.length, scale, true);
  return out;
}

describe('the 8-bit KV kernels (kv_write_i8, attention on an int8 pool)', () => {
  const [kvHeads, heads, headDim, blockSize, tokens] = [2, 4, 64, 16, 37];
  const row = headDim + 4;
  const next = mulberry32(11);
  const rand = (n: number) => Float32Array.from({ length: n }, () => (next() - 0.5) * 6);
  const k = rand(tokens * kvHeads * headDim);
  const v = rand(tokens * kvHeads * headDim);
  k.fill(0, 5 * kvHeads * headDim, 5 * kvHeads * headDim + headDim); // an all-zero row keeps a zero scale
  const q = rand(tokens * heads * headDim);
  const table = [3, 0, 2]; // blocks out of order

  async function run(build: 'baseline' | 'relaxed'): Promise<{ pool: Uint8Array; out: Float32Array }> {
    const { kernels, memory } = await instantiateKernels(edgeKernelsModule(build));
    const poolBytes = 4 * kvHeads * blockSize * row;
    const [kp, vp] = [memory.alloc(poolBytes), memory.alloc(poolBytes)];
    const put = (a: Float32Array) => {
      const at = memory.alloc(a.byteLength);
      memory.f32(at, a.length).set(a);
      return at;
    };
    const tp = memory.alloc(table.length * 4);
    memory.i32(tp, table.length).set(table);
    const [kPtr, vPtr, qPtr] = [put(k), put(v), put(q)];
    const out = memory.alloc(q.byteLength);
    const scores = memory.alloc(tokens * (heads / kvHeads) * (tokens + 4) * 4);
    // Two writes (a prefill, then the rest), as a cached prefix and its continuation would be.
    kernels.kv_write_i8(kp, vp, tp, 0, 20, kPtr, vPtr, kvHeads, headDim, blockSize);
    const rest = 20 * kvHeads * headDim * 4;
    kernels.kv_write_i8(kp, vp, tp, 20, tokens - 20, kPtr + rest, vPtr + rest, kvHeads, headDim, blockSize);
    kernels.attention(out, qPtr, kp, vp, tp, 0, tokens, heads, kvHeads, headDim, blockSize, 0.125, scores, 2, 0);
    return { pool: memory.read(kp, poolBytes).slice(), out: memory.f32(out, q.length).slice() };
  }

  it('stores each row as the plain quantiser does, and both builds compute the same bits', async () => {
    const [base, relaxed] = await Promise.all([run('baseline'), run('relaxed')]);
    for (let t = 0; t < tokens; t++)
      for (let h = 0; h < kvHeads; h++) {
        const at = ((table[Math.floor(t / blockSize)] * kvHeads + h) * blockSize + (t % blockSize)) * row;
        const want = int8RowBytes(k.subarray((t * kvHeads + h) * headDim, (t * kvHeads + h + 1) * headDim));
        expect(Buffer.from(base.pool.subarray(at, at + row)).equals(Buffer.from(want)), `token ${t} head ${h}`).toBe(
          true,
        );
      }
    expect(bits(relaxed.out)).toBe(bits(base.out));
    expect(Buffer.from(relaxed.pool).equals(Buffer.from(base.pool))).toBe(true);
  });
});

// shaders/greedy.wgsl and sample.wgsl against the CPU sampler (src/engine/sampling) on the same logits.
// Vocabularies of 37 and 1000 (not multiples of the 256-wide workgroup), rows with NaN, +-inf, exact
// ties at the top and at the top-k boundary, several rows per dispatch, and several steps so the
// penalties accumulate; allowed_token_ids masks. Stated tolerances: token ids equal (the kernels sum in float32; the CPU in
// float64 — they could differ only when a value lands within float32 rounding of a cut, which these
// seeded cases do not hit), logprobs within 2e-5.
import { beforeAll, describe, expect, it } from 'vitest';
import { nodeShaderSource } from '../../src/backends/ort-webgpu-node.js';
import { DeviceSampler } from '../../src/engine/runners/webgpu/device-sampler.js';
import { DeviceSamplerState } from '../../src/engine/sampling/device-sampler-state.js';
import { WgslKernels } from '../../src/engine/runners/webgpu/wgsl-kernels.js';
import { BufferUsage } from '../../src/engine/runners/webgpu/usage.js';
import { resolveSamplingParams, type SamplingInput } from '../../src/engine/sampling/sampling-params.js';
import { TokenSampler } from '../../src/engine/sampling/sampler.js';
import { mulberry32 } from '../helpers/prng.js';
import { gpu, skipNote } from './gpu.js';

const LOGPROB_TOLERANCE = 2e-5;

/** `rows` rows of `vocab` logits with std ~3, a few special values, and an exact tie at the top of row 0. */
function makeLogits(seed: number, rows: number, vocab: number, quantised = false): Float32Array {
  const rand = mulberry32(seed);
  const a = new Float32Array(rows * vocab);
  for (let i = 0; i < a.length; i++) a[i] = (rand() + rand() + rand() - 1.5) * 6;
  // Whole numbers: many exact ties, so top-k and top-p cuts fall inside groups of equal values.
  if (quantised) for (let i = 0; i < a.length; i++) a[i] = Math.round(a[i]);
  for (let r = 0; r < rows; r++) {
    const row = a.subarray(r * vocab, (r + 1) * vocab);
    row[3] = NaN;
    row[5] = -Infinity;
    if (r === 0) {
      row[7] = 20;
      row[vocab - 2] = 20; // tie: the lower id wins greedy
    }
  }
  return a;
}

describe.skipIf(!gpu)(`sampling kernels on the device${skipNote}`, () => {
  let sampler: (vocab: number) => DeviceSampler;
  beforeAll(async () => {
    const kernels = await WgslKernels.create(gpu!.device, nodeShaderSource, ['greedy', 'sample']);
    sampler = (vocab) => new DeviceSampler(kernels, vocab);
  });

  const upload = (data: Float32Array): GPUBuffer => {
    const b = gpu!.device.createBuffer({ size: data.byteLength, usage: BufferUsage.STORAGE | BufferUsage.COPY_DST });
    gpu!.device.queue.writeBuffer(b, 0, data as Float32Array<ArrayBuffer>);
    return b;
  };

  for (const vocab of [37, 1000]) {
    it(`greedy: argmax (lowest id on ties, NaN and +inf sanitised) and log-softmax, vocab ${vocab}`, async () => {
      const rows = 5;
      const logits = makeLogits(vocab, rows, vocab);
      logits[vocab + 11] = Infinity; // row 1: +inf is the largest float32, and wins
      const buffer = upload(logits);
      const got = await sampler(vocab).greedy(
        buffer,
        Array.from({ length: rows }, (_, r) => r * vocab),
      );
      buffer.destroy();
      for (let r = 0; r < rows; r++) {
        const cpu = new TokenSampler(resolveSamplingParams({ temperature: 0, logprobs: true }, vocab), {
          vocabSize: vocab,
          promptTokenIds: [],
        });
        const want = cpu.sample(logits.subarray(r * vocab, (r + 1) * vocab));
        expect(got[r].tokenId, `row ${r}`).toBe(want.tokenId);
        expect(Math.abs(got[r].logprob - want.logprob!), `row ${r} logprob`).toBeLessThan(LOGPROB_TOLERANCE);
      }
      expect(got[0].tokenId).toBe(7);
      expect(got[1].tokenId).toBe(11);
    });
  }

  const cases: [string, SamplingInput][] = [
    [
      'greedy with penalties and bias',
      {
        temperature: 0,
        repetition_penalty: 1.3,
        frequency_penalty: 0.7,
        presence_penalty: 0.4,
        logit_bias: { 9: 5, 12: -3 },
      },
    ],
    ['temperature only', { temperature: 1 }],
    ['temperature 0.7, top_k 5', { temperature: 0.7, top_k: 5 }],
    ['top_p 0.8', { temperature: 1.2, top_p: 0.8 }],
    ['top_p 0.5, top_k 3', { temperature: 1, top_p: 0.5, top_k: 3 }],
    ['min_p 0.05', { temperature: 0.9, min_p: 0.05 }],
    [
      'everything',
      {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.02,
        repetition_penalty: 1.2,
        frequency_penalty: 0.5,
        presence_penalty: -0.3,
        logit_bias: { 2: 4 },
      },
    ],
    ['logprobs with top 5', { temperature: 1, top_p: 0.95, logprobs: true, top_logprobs: 5 }],
    ['allowed_token_ids, greedy', { temperature: 0, allowed_token_ids: [0, 2, 5, 9, 11, 31, 32, 33] }],
    [
      'allowed_token_ids, sampled',
      { temperature: 1.5, allowed_token_ids: [1, 2, 5, 9, 11, 31, 32, 36], logprobs: true },
    ],
  ];

  for (const [vocab, quantised] of [
    [37, false],
    [1000, false],
    [1000, true],
  ] as const) {
    it(`sample: the CPU sampler's tokens, seeded, over 6 steps x 4 rows x 10 settings, vocab ${vocab}${quantised ? ', tied logits' : ''}`, async () => {
      const device = sampler(vocab);
      let drawn = 0;
      for (const [name, input] of cases) {
        const rows = 4;
        const prompt = [1, 4, 9, 16, 25].map((id) => id % vocab);
        const make = (r: number) => resolveSamplingParams({ ...input, seed: 1000 + r }, vocab);
        const cpu = Array.from(
          { length: rows },
          (_, r) => new TokenSampler(make(r), { vocabSize: vocab, promptTokenIds: prompt }),
        );
        const gpuStates = Array.from(
          { length: rows },
          (_, r) => new DeviceSamplerState(make(r), { vocabSize: vocab, promptTokenIds: prompt }),
        );
        for (let step = 0; step < 6; step++) {
          const logits = makeLogits(vocab * 100 + step, rows, vocab, quantised);
          // The model's logits buffer holds more than the rows read: starts need not be r * vocab.
          const padded = new Float32Array(logits.length + 3 * vocab);
          const starts = [0, 2, 3, 6].map((k) => k * vocab); // inside a buffer of 7 rows
          for (const [r, s] of starts.entries()) padded.set(logits.subarray(r * vocab, (r + 1) * vocab), s);
          const buffer = upload(padded);
          const got = await device.sample(buffer, starts, gpuStates);
          buffer.destroy();
          for (let r = 0; r < rows; r++) {
            const want = cpu[r].sample(logits.subarray(r * vocab, (r + 1) * vocab));
            const where = `${name}, step ${step}, row ${r}`;
            expect(got[r].tokenId, where).toBe(want.tokenId);
            if (want.logprob !== undefined) {
              expect(Math.abs(got[r].logprob! - want.logprob), `${where} logprob`).toBeLessThan(LOGPROB_TOLERANCE);
              expect(
                got[r].topLogprobs!.map((t) => t.tokenId),
                `${where} top ids`,
              ).toEqual(want.topLogprobs!.map((t) => t.tokenId));
              for (const [j, t] of got[r].topLogprobs!.entries())
                expect(Math.abs(t.logprob - want.topLogprobs![j].logprob)).toBeLessThan(LOGPROB_TOLERANCE);
            }
            drawn++;
          }
        }
      }
      expect(drawn).toBe(cases.length * 6 * 4);
    });
  }

  it("the draw follows the seeded stream: the CPU sampler's token for each seed, other seeds other tokens", async () => {
    const vocab = 1000;
    const logits = new Float32Array(vocab); // uniform: the token is u's position, so it shows the stream
    const buffer = upload(logits);
    // Seeds apart in their high 32 bits too (rng.ts once drew the same first number for every seed < 2^32).
    const seeds = [7, 2 ** 33 + 1, 2 ** 40 + 5, 2 ** 45 + 3];
    const params = (seed: number) => resolveSamplingParams({ temperature: 1, seed }, vocab);
    const states = seeds.map((seed) => new DeviceSamplerState(params(seed), { vocabSize: vocab, promptTokenIds: [] }));
    const cpu = seeds.map((seed) => new TokenSampler(params(seed), { vocabSize: vocab, promptTokenIds: [] }));
    for (let step = 0; step < 3; step++) {
      const got = (await sampler(vocab).sample(buffer, [0, 0, 0, 0], states)).map((g) => g.tokenId);
      expect(got).toEqual(cpu.map((c) => c.sample(logits).tokenId));
      expect(new Set(got).size).toBeGreaterThan(2);
    }
    buffer.destroy();
  });
});

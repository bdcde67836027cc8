// Structured outputs where tokens are drawn on the device (WebGPU): the grammar's bitmask goes to the
// sampling kernel with the step's other settings, so constrained rows never bring their logits back.
// Greedy output equals the wasm engine's under the same grammar; seeded samples all match it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import type { ConstraintSpec } from '../../src/engine/constraints/spec.js';
import { DeviceSampler } from '../../src/engine/runners/webgpu/device-sampler.js';
import { collect, loadEngine } from '../helpers/engines.js';
import { gpu, skipNote } from './gpu.js';

const PATTERN = '[a-z]{3,6}@(foo|bar)\\.(com|org)';
const SPECS: ConstraintSpec[] = [
  { type: 'regex', pattern: PATTERN },
  { type: 'choice', choices: ['positive', 'negative', 'neutral'] },
  {
    type: 'json_schema',
    schema: {
      type: 'object',
      properties: { n: { type: 'integer', minimum: 0, maximum: 99 }, ok: { type: 'boolean' } },
      required: ['n', 'ok'],
      additionalProperties: false,
    },
  },
];

describe.skipIf(!gpu)(`structured outputs on the WebGPU device sampler${skipNote}`, () => {
  let webgpu: Engine;
  let wasm: Engine;
  /** Draws the device sampler made with a grammar's mask. */
  let maskedDraws = 0;
  const sample = DeviceSampler.prototype.sample;
  beforeAll(async () => {
    DeviceSampler.prototype.sample = function (this: DeviceSampler, ...args: Parameters<typeof sample>) {
      maskedDraws += (args[3] ?? []).filter((m) => m !== undefined).length;
      return sample.apply(this, args);
    };
    webgpu = await loadEngine('webgpu', 'tiny');
    wasm = await loadEngine('wasm', 'tiny');
  });
  afterAll(async () => {
    DeviceSampler.prototype.sample = sample;
    await webgpu?.runner.release();
    await wasm?.runner.release();
  });

  it("greedy under a grammar gives the wasm engine's text, drawn on the device", async () => {
    for (const spec of SPECS) {
      const request = {
        prompt: 'Answer:',
        max_tokens: 60,
        temperature: 0,
        constraint: { spec, param: 'response_format' },
      };
      const [got, want] = [await collect(webgpu, request), await collect(wasm, request)];
      expect(got.done.text, spec.type).toBe(want.done.text);
      expect(got.done.finishReason).toBe('stop');
      expect(maskedDraws, spec.type).toBeGreaterThanOrEqual(got.done.tokenIds.length);
      maskedDraws = 0;
    }
    expect(webgpu.stats().runner).toBe('onnxruntime');
  });

  it('seeded samples at temperature 1 all match the grammar', async () => {
    const request = {
      prompt: 'Mail:',
      n: 8,
      max_tokens: 60,
      temperature: 1,
      seed: 7,
      constraint: { spec: SPECS[0], param: 'structured_outputs.regex' },
    };
    const texts: string[] = [];
    for await (const event of webgpu.generate(request)) if (event.type === 'done') texts.push(event.text);
    expect(texts).toHaveLength(8);
    for (const text of texts) expect(text).toMatch(new RegExp(`^${PATTERN}$`));
    expect(new Set(texts).size).toBeGreaterThan(1);
  });
});

import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../src/engine/errors.js';
import { DEFAULT_SAMPLING, resolveSamplingParams, type SamplingInput } from '../src/engine/sampling/sampling-params.js';

const VOCAB = 100;

function paramOf(input: SamplingInput): string | undefined {
  try {
    resolveSamplingParams(input, VOCAB);
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidRequestError);
    return (e as InvalidRequestError).param;
  }
  return undefined;
}

describe('resolveSamplingParams', () => {
  it('gives the defaults for an empty request and for nulls', () => {
    expect(resolveSamplingParams({}, VOCAB)).toEqual({ ...DEFAULT_SAMPLING, logitBias: new Map() });
    const nulls = resolveSamplingParams(
      {
        temperature: null,
        top_p: null,
        top_k: null,
        min_p: null,
        frequency_penalty: null,
        presence_penalty: null,
        repetition_penalty: null,
        logit_bias: null,
        seed: null,
        logprobs: null,
        top_logprobs: null,
      },
      VOCAB,
    );
    expect(nulls).toEqual({ ...DEFAULT_SAMPLING, logitBias: new Map() });
  });

  it('maps OpenAI spelling onto the resolved params', () => {
    const p = resolveSamplingParams(
      {
        temperature: 0.7,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.05,
        frequency_penalty: -1.5,
        presence_penalty: 2,
        repetition_penalty: 1.1,
        logit_bias: { '5': -100, '17': 3.5, '9': 0 },
        seed: -12,
        logprobs: true,
        top_logprobs: 20,
      },
      VOCAB,
    );
    expect(p).toEqual({
      temperature: 0.7,
      topK: 40,
      topP: 0.9,
      minP: 0.05,
      frequencyPenalty: -1.5,
      presencePenalty: 2,
      repetitionPenalty: 1.1,
      logitBias: new Map([
        [5, -100],
        [17, 3.5],
      ]),
      seed: -12,
      logprobs: true,
      topLogprobs: 20,
    });
  });

  it('accepts the edges of every range', () => {
    const ok: SamplingInput[] = [
      { temperature: 0 },
      { temperature: 2 },
      { top_p: 1 },
      { top_p: 1e-9 },
      { top_k: 0 },
      { top_k: -1 },
      { top_k: 1 },
      { top_k: 1_000_000 },
      { min_p: 0 },
      { min_p: 1 },
      { frequency_penalty: -2 },
      { frequency_penalty: 2 },
      { presence_penalty: -2 },
      { presence_penalty: 2 },
      { repetition_penalty: 2 },
      { repetition_penalty: 1e-3 },
      { logit_bias: { '0': -100, '99': 100 } },
      { seed: 0 },
      { seed: Number.MAX_SAFE_INTEGER },
      { seed: Number.MIN_SAFE_INTEGER },
      { logprobs: false, top_logprobs: 0 },
      { logprobs: true, top_logprobs: 0 },
    ];
    for (const input of ok) expect(paramOf(input), JSON.stringify(input)).toBeUndefined();
    expect(resolveSamplingParams({ top_k: -1 }, VOCAB).topK).toBe(0);
  });

  const bad: [SamplingInput, string][] = [
    [{ temperature: -0.1 }, 'temperature'],
    [{ temperature: 2.0001 }, 'temperature'],
    [{ temperature: NaN }, 'temperature'],
    [{ temperature: Infinity }, 'temperature'],
    [{ temperature: '1' }, 'temperature'],
    [{ temperature: true }, 'temperature'],
    [{ top_p: 0 }, 'top_p'],
    [{ top_p: 1.5 }, 'top_p'],
    [{ top_p: -0.5 }, 'top_p'],
    [{ top_p: NaN }, 'top_p'],
    [{ top_p: '0.9' }, 'top_p'],
    [{ top_k: 1.5 }, 'top_k'],
    [{ top_k: -2 }, 'top_k'],
    [{ top_k: NaN }, 'top_k'],
    [{ top_k: Infinity }, 'top_k'],
    [{ top_k: '5' }, 'top_k'],
    [{ min_p: -0.01 }, 'min_p'],
    [{ min_p: 1.01 }, 'min_p'],
    [{ min_p: NaN }, 'min_p'],
    [{ frequency_penalty: 2.5 }, 'frequency_penalty'],
    [{ frequency_penalty: -2.5 }, 'frequency_penalty'],
    [{ frequency_penalty: NaN }, 'frequency_penalty'],
    [{ presence_penalty: 2.01 }, 'presence_penalty'],
    [{ presence_penalty: -Infinity }, 'presence_penalty'],
    [{ presence_penalty: [] }, 'presence_penalty'],
    [{ repetition_penalty: 0 }, 'repetition_penalty'],
    [{ repetition_penalty: -1 }, 'repetition_penalty'],
    [{ repetition_penalty: 2.1 }, 'repetition_penalty'],
    [{ repetition_penalty: NaN }, 'repetition_penalty'],
    [{ logit_bias: { '100': 1 } }, 'logit_bias'],
    [{ logit_bias: { '-1': 1 } }, 'logit_bias'],
    [{ logit_bias: { '1.5': 1 } }, 'logit_bias'],
    [{ logit_bias: { abc: 1 } }, 'logit_bias'],
    [{ logit_bias: { '01': 1 } }, 'logit_bias'],
    [{ logit_bias: { '': 1 } }, 'logit_bias'],
    [{ logit_bias: { '3': 101 } }, 'logit_bias'],
    [{ logit_bias: { '3': -100.5 } }, 'logit_bias'],
    [{ logit_bias: { '3': NaN } }, 'logit_bias'],
    [{ logit_bias: { '3': '1' } }, 'logit_bias'],
    [{ logit_bias: { '3': null } }, 'logit_bias'],
    [{ logit_bias: [1, 2] }, 'logit_bias'],
    [{ logit_bias: 'x' }, 'logit_bias'],
    [{ seed: 1.5 }, 'seed'],
    [{ seed: NaN }, 'seed'],
    [{ seed: 2 ** 53 }, 'seed'],
    [{ seed: '42' }, 'seed'],
    [{ logprobs: 1 }, 'logprobs'],
    [{ logprobs: 'true' }, 'logprobs'],
    [{ top_logprobs: 21, logprobs: true }, 'top_logprobs'],
    [{ top_logprobs: -1, logprobs: true }, 'top_logprobs'],
    [{ top_logprobs: 2.5, logprobs: true }, 'top_logprobs'],
    [{ top_logprobs: NaN, logprobs: true }, 'top_logprobs'],
    [{ top_logprobs: 3 }, 'top_logprobs'],
    [{ top_logprobs: 3, logprobs: false }, 'top_logprobs'],
  ];
  it.each(bad)('refuses %j naming %s', (input, param) => {
    expect(paramOf(input)).toBe(param);
  });

  it('throws with code invalid_value and a message that names the field', () => {
    try {
      resolveSamplingParams({ top_p: 0 }, VOCAB);
      expect.unreachable();
    } catch (e) {
      const err = e as InvalidRequestError;
      expect(err.code).toBe('invalid_value');
      expect(err.message).toContain('top_p');
    }
  });
});

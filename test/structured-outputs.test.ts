// Structured outputs in the engine: with the random tiny model at temperature 1, every one of 50 seeded
// samples per schema parses and validates (ajv, not our own checker); regex, choice and grammar
// constraints match every time; and what cannot be enforced is refused by name before anything runs.
import Ajv from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { ConstraintSpec, JsonValue } from '../src/engine/constraints/spec.js';
import { collect, loadEngine, SUITE_BACKEND } from './helpers/engines.js';

const SAMPLES = 50;

const SCHEMAS: Record<string, { [key: string]: JsonValue }> = {
  nested: {
    type: 'object',
    properties: {
      user: {
        type: 'object',
        properties: { name: { type: 'string', maxLength: 12 }, admin: { type: 'boolean' } },
        required: ['name', 'admin'],
        additionalProperties: false,
      },
      note: { type: 'string', maxLength: 8 },
    },
    required: ['user'],
    additionalProperties: false,
  },
  arrays: {
    type: 'object',
    properties: {
      tags: { type: 'array', items: { type: 'string', maxLength: 4 }, minItems: 1, maxItems: 3 },
      scores: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 }, maxItems: 2 },
    },
    required: ['tags', 'scores'],
    additionalProperties: false,
  },
  enums: {
    type: 'object',
    properties: {
      color: { enum: ['red', 'green', 'blue'] },
      size: { const: 'L' },
      level: { type: 'integer', enum: [1, 2, 3] },
    },
    required: ['color', 'size', 'level'],
    additionalProperties: false,
  },
  anyOf: {
    type: 'object',
    properties: {
      value: {
        anyOf: [
          { type: 'integer', minimum: 10, maximum: 99 },
          { type: 'null' },
          { type: 'string', pattern: '^[a-c]{2}$' },
        ],
      },
    },
    required: ['value'],
    additionalProperties: false,
  },
  optional: {
    type: 'object',
    properties: {
      a: { type: 'integer', minimum: -5, maximum: 5 },
      b: { type: 'boolean' },
      c: { type: 'string', maxLength: 3 },
    },
    required: ['a'],
    additionalProperties: false,
  },
  patterns: {
    type: 'object',
    properties: {
      code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' },
      zip: { type: 'string', pattern: '^\\d{5}$' },
      word: { type: 'string', minLength: 2, maxLength: 5 },
    },
    required: ['code', 'zip', 'word'],
    additionalProperties: false,
  },
  ranges: {
    type: 'object',
    properties: {
      age: { type: 'integer', minimum: 18, maximum: 65 },
      temp: { type: 'integer', exclusiveMinimum: -10, exclusiveMaximum: 40 },
      ratio: { type: 'number', minimum: 0, maximum: 1 },
    },
    required: ['age', 'temp', 'ratio'],
    additionalProperties: false,
  },
  refs: {
    type: 'object',
    $defs: {
      point: {
        type: 'object',
        properties: { x: { type: 'integer', minimum: 0, maximum: 9 }, y: { type: 'integer', minimum: 0, maximum: 9 } },
        required: ['x', 'y'],
        additionalProperties: false,
      },
    },
    properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' } },
    required: ['from', 'to'],
    additionalProperties: false,
  },
};

let engine: Engine;
beforeAll(async () => {
  engine = await loadEngine(SUITE_BACKEND);
});
afterAll(async () => {
  await engine.runner.release();
});

/** Runs the request with `spec` as its constraint, n = SAMPLES seeded completions at temperature 1. */
async function samples(
  spec: ConstraintSpec,
  extra: Record<string, unknown> = {},
): Promise<{ text: string; finishReason: string }[]> {
  const out: { text: string; finishReason: string }[] = [];
  const n = 10;
  for (let round = 0; round < SAMPLES / n; round++) {
    const done: { text: string; finishReason: string }[] = [];
    for await (const event of engine.generate({
      prompt: 'Answer in JSON:',
      n,
      temperature: 1,
      seed: 1000 + round * n,
      max_tokens: 400,
      constraint: { spec, param: 'response_format' },
      ...extra,
    })) {
      if (event.type === 'done') done[event.index] = { text: event.text, finishReason: event.finishReason };
    }
    out.push(...done);
  }
  return out;
}

describe('JSON schema: 50 seeded samples at temperature 1 all validate', () => {
  const ajv = new Ajv({ strict: false });
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    it(name, async () => {
      const validate = ajv.compile(schema);
      const results = await samples({ type: 'json_schema', schema });
      expect(results).toHaveLength(SAMPLES);
      for (const { text, finishReason } of results) {
        expect(finishReason, text).toBe('stop');
        const value: unknown = JSON.parse(text);
        expect(validate(value), `${text}\n${JSON.stringify(validate.errors)}`).toBe(true);
      }
      // Random weights: the samples differ, so the grammar is doing the work, not one lucky completion.
      expect(new Set(results.map((r) => r.text)).size).toBeGreaterThan(1);
    });
  }

  it('json_object gives a JSON object every time', async () => {
    // An unbounded object may run into max_tokens; every one that finished must parse as an object.
    const finished = (await samples({ type: 'json_object' }, { max_tokens: 200 })).filter(
      (r) => r.finishReason === 'stop',
    );
    expect(finished.length).toBeGreaterThan(0);
    for (const { text } of finished) expect(typeof JSON.parse(text)).toBe('object');
  });
});

describe('regex, choice and grammar', () => {
  it('a regex matches every time', async () => {
    const pattern = '[a-z]{3,6}@(foo|bar)\\.(com|org)';
    for (const { text, finishReason } of await samples({ type: 'regex', pattern })) {
      expect(finishReason).toBe('stop');
      expect(text).toMatch(new RegExp(`^${pattern}$`));
    }
  });

  it('a choice is one of the choices', async () => {
    const choices = ['positive', 'negative', 'neutral'];
    const seen = new Set<string>();
    for (const { text } of await samples({ type: 'choice', choices })) {
      expect(choices).toContain(text);
      seen.add(text);
    }
    expect(seen.size).toBeGreaterThan(1);
  });

  it('an EBNF grammar is followed', async () => {
    const ebnf = 'root ::= "(" expr ")"\nexpr ::= num (("+" | "*") num)*\nnum ::= [1-9] [0-9]?';
    for (const { text } of await samples({ type: 'grammar', ebnf }))
      expect(text).toMatch(/^\([1-9][0-9]?([+*][1-9][0-9]?)*\)$/);
  });
});

describe('refusals', () => {
  const refusal = (spec: ConstraintSpec): InvalidRequestError => {
    try {
      engine.generate({ prompt: 'x', constraint: { spec, param: 'response_format' } });
    } catch (err) {
      expect(err).toBeInstanceOf(InvalidRequestError);
      return err as InvalidRequestError;
    }
    throw new Error('not refused');
  };

  it('names the keyword it cannot enforce', () => {
    for (const keyword of ['multipleOf', 'uniqueItems', 'not', 'if', 'minProperties', 'oneOf']) {
      const schema = {
        type: 'object',
        properties: {
          a: {
            type: 'integer',
            [keyword]: keyword === 'not' || keyword === 'if' ? {} : keyword === 'oneOf' ? [{ type: 'integer' }] : 2,
          },
        },
      };
      const err = refusal({ type: 'json_schema', schema });
      expect(err.message).toContain(`'${keyword}'`);
      expect(err.message).toContain('#/properties/a');
      expect(err.code).toBe('unsupported_schema_feature');
      expect(err.param).toBe('response_format');
    }
  });

  it('refuses a bad regex and a bad grammar with xgrammar’s reason, and keeps serving', async () => {
    expect(refusal({ type: 'regex', pattern: '(ab' }).message).toMatch(/regular expression/);
    expect(refusal({ type: 'grammar', ebnf: 'root ::= "a" |' }).message.length).toBeGreaterThan(10);
    expect(refusal({ type: 'grammar', ebnf: 'start ::= "a"' }).message.length).toBeGreaterThan(10);
    const [{ text }] = await samples({ type: 'choice', choices: ['yes', 'no'] });
    expect(['yes', 'no']).toContain(text);
  });

  it('compiles a schema once per tokenizer (cached)', async () => {
    const before = { ...engine.constraints.stats };
    await collect(engine, {
      prompt: 'x',
      max_tokens: 50,
      constraint: { spec: { type: 'json_schema', schema: SCHEMAS.enums }, param: 'response_format' },
    });
    expect(engine.constraints.stats.compiles).toBe(before.compiles);
    expect(engine.constraints.stats.cacheHits).toBeGreaterThan(before.cacheHits);
  });
});

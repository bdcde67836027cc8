// Synchronous work a request brings has a budget checked before it runs: a prompt that cannot fit the context
// is refused before it is tokenised, and a structured output past its size limits before it is compiled, each a
// 400 naming the limit; the engine is untouched (no pass, no compile).
import { beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { CONSTRAINT_LIMITS } from '../src/engine/constraints/constraint-limits.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import { loadEngine } from './helpers/engines.js';

let engine: Engine;
beforeAll(async () => {
  engine = await loadEngine('kernels', 'tiny', { dtype: 'q4' });
});

function refusal(request: Parameters<Engine['resolve']>[0]): InvalidRequestError {
  try {
    engine.resolve(request);
  } catch (err) {
    if (err instanceof InvalidRequestError) return err;
    throw err;
  }
  throw new Error('the request was not refused');
}

describe('budgets of synchronous work', () => {
  it('refuses a prompt longer than the context could hold, before tokenising it', () => {
    const max = engine.config.maxPositionEmbeddings * engine.tokenizer.longestTokenBytes;
    expect(engine.tokenizer.longestTokenBytes).toBeGreaterThan(1);
    const err = refusal({ prompt: 'a'.repeat(max + 1), max_tokens: 1 });
    expect(err).toMatchObject({ param: 'prompt', code: 'context_length_exceeded' });
    expect(err.message).toMatch(/not tokenised/);
    const chat = refusal({ messages: [{ role: 'user', content: 'b'.repeat(max + 1) }], max_tokens: 1 });
    expect(chat).toMatchObject({ param: 'messages', code: 'context_length_exceeded' });
    // Within the bound the tokenizer decides (and here still refuses: too many tokens, counted).
    expect(refusal({ prompt: 'a '.repeat(3000), max_tokens: 1 }).message).toMatch(/tokens/);
  });

  it('counts tools with the messages, every string, key and value at any depth, before rendering them', () => {
    const max = engine.config.maxPositionEmbeddings * engine.tokenizer.longestTokenBytes;
    const messages = [{ role: 'user', content: 'Hi' }];
    const tool = (parameters: Record<string, unknown>, description = 'Look up') => ({
      type: 'function',
      function: { name: 'lookup', description, parameters },
    });
    let deep: Record<string, unknown> = { type: 'string', description: 'z'.repeat(max) };
    for (let i = 0; i < 12; i++) deep = { type: 'object', properties: { [`p${i}`]: deep } };
    const cases = [
      tool({ type: 'object' }, 'd'.repeat(max + 1)), // the description
      tool(deep), // deep in the schema, past any depth a walk might stop at
      tool({ type: 'object', properties: { ['k'.repeat(max + 1)]: { type: 'string' } } }), // a key
    ];
    for (const t of cases) {
      const err = refusal({ messages, tools: [t], max_tokens: 1 });
      expect(err).toMatchObject({ param: 'tools', code: 'context_length_exceeded' });
      expect(err.message).toMatch(/not tokenised/);
    }
    // Half the bound in the messages and half in the tools: together past it.
    const half = Math.ceil(max / 2) + 1;
    expect(
      refusal({ messages: [{ role: 'user', content: 'm'.repeat(half) }], tools: [tool({}, 't'.repeat(half))] }),
    ).toMatchObject({ code: 'context_length_exceeded' });
  });

  it('refuses structured outputs past their size before compiling them', () => {
    const compiles = engine.stats().grammar.compiles;
    const big = Object.fromEntries(
      Array.from({ length: 3000 }, (_, i) => [`field_${i}`, { type: 'string', description: 'x'.repeat(20) }]),
    );
    const longLiterals = Array.from({ length: 16 }, (_, i) => `${i}`.padEnd(257, 'x'));
    const cases: [Parameters<Engine['resolve']>[0], RegExp][] = [
      [
        {
          prompt: 'Hi',
          constraint: {
            param: 'response_format',
            spec: { type: 'json_schema', schema: { type: 'object', properties: big } },
          },
        },
        /schema \(as JSON\) is \d+ long, past the limit of 65536/,
      ],
      [
        {
          prompt: 'Hi',
          constraint: {
            param: 'structured_outputs.regex',
            spec: { type: 'regex', pattern: 'a'.repeat(CONSTRAINT_LIMITS.patternChars + 1) },
          },
        },
        /pattern is 4097 long/,
      ],
      [
        {
          prompt: 'Hi',
          constraint: {
            param: 'structured_outputs.choice',
            spec: { type: 'choice', choices: Array.from({ length: 513 }, (_, i) => `c${i}`) },
          },
        },
        /list of choices is 513 long/,
      ],
      [
        {
          prompt: 'Hi',
          constraint: {
            param: 'structured_outputs.choice',
            spec: { type: 'choice', choices: Array.from({ length: 16 }, (_, i) => `${i}`.padEnd(257, 'x')) },
          },
        },
        /choices together is 4112 long/,
      ],
      [
        {
          prompt: 'Hi',
          constraint: {
            param: 'structured_outputs.grammar',
            spec: { type: 'grammar', ebnf: `root ::= "${'a'.repeat(70_000)}"` },
          },
        },
        /grammar is \d+ long/,
      ],
      // Small as text, dear to compile: long alternatives (enum strings, patterns, quoted EBNF strings).
      [
        {
          prompt: 'Hi',
          constraint: { param: 'response_format', spec: { type: 'json_schema', schema: { enum: longLiterals } } },
        },
        /enum strings and patterns is 4112 long, past the limit of 4096/,
      ],
      [
        {
          prompt: 'Hi',
          constraint: {
            param: 'response_format',
            spec: {
              type: 'json_schema',
              schema: { type: 'object', properties: { a: { type: 'string', pattern: longLiterals.join('|') } } },
            },
          },
        },
        /enum strings and patterns is 4127 long/,
      ],
      [
        {
          prompt: 'Hi',
          constraint: {
            param: 'structured_outputs.grammar',
            spec: { type: 'grammar', ebnf: `root ::= ${longLiterals.map((l) => `"${l}"`).join(' | ')}` },
          },
        },
        /grammar's quoted strings is 4112 long/,
      ],
    ];
    for (const [request, message] of cases) {
      const err = refusal({ ...request, max_tokens: 4 });
      expect(err.code).toBe('constraint_too_large');
      expect(err.message).toMatch(message);
    }
    expect(engine.stats().grammar.compiles).toBe(compiles);
  });
});

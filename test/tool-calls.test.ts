// Tool calls in the model's text (Hermes format), parsed whole and as a stream split at every possible
// point; and the grammar matcher's rollback and fork, which beams and speculation lean on.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { parseToolCalls, ToolCallParser, type ToolCallDelta } from '../src/worker/tool-calls.js';
import {
  toolCallText,
  TOOL_CALL_BEGIN,
  TOOL_CALL_END,
  TOOL_CALL_SUFFIX,
  toolCallPrefix,
} from '../src/tokenizer/tool-format.js';
import type { JsonObject } from '../src/worker/body.js';
import { withRequestWhitespace } from '../src/worker/structured.js';
import { toolUse } from '../src/worker/tools.js';
import { collect, loadEngine } from './helpers/engines.js';

const call = (name: string, args: string): string => toolCallText(name, args);

describe('tool-call parsing', () => {
  const text = `Let me check.\n${call('get_weather', '{"city": "Paris", "n": [1, {"a": "}"}]}')}\n${call('get_time', '{}')}`;

  it('parses content and every call of a whole completion', () => {
    const { content, calls } = parseToolCalls(text);
    expect(content).toBe('Let me check.');
    expect(calls.map((c) => c.function.name)).toEqual(['get_weather', 'get_time']);
    expect(JSON.parse(calls[0].function.arguments)).toEqual({ city: 'Paris', n: [1, { a: '}' }] });
    expect(calls[1].function.arguments).toBe('{}');
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
  });

  it('streams the same result however the text is split, header first, then argument fragments', () => {
    for (let step = 1; step <= 7; step++) {
      const parser = new ToolCallParser();
      let content = '';
      const deltas: ToolCallDelta[] = [];
      for (let i = 0; i < text.length; i += step) {
        const out = parser.push(text.slice(i, i + step));
        content += out.content;
        deltas.push(...out.deltas);
      }
      content += parser.flush();
      expect(content.trim()).toBe('Let me check.');
      for (const index of [0, 1]) {
        const mine = deltas.filter((d) => d.index === index);
        expect(mine[0].id).toMatch(/^call_/);
        expect(mine[0].function.name).toBe(index === 0 ? 'get_weather' : 'get_time');
        expect(mine.slice(1).every((d) => d.id === undefined && d.function.name === undefined)).toBe(true);
        expect(mine.map((d) => d.function.arguments).join('')).toBe(
          parseToolCalls(text).calls[index].function.arguments,
        );
      }
    }
  });

  it('gives back as content what is not a call, and text with no calls untouched', () => {
    expect(parseToolCalls('<tool_call>not json</tool_call> bye')).toEqual({
      content: '<tool_call>not json</tool_call> bye',
      calls: [],
    });
    expect(parseToolCalls('a < b <tool')).toEqual({ content: 'a < b <tool', calls: [] });
    // A block cut before its header (max_tokens) leaves no markup behind; a cut call keeps its name.
    expect(parseToolCalls('Let me see. <tool_call>\n{"na')).toEqual({ content: 'Let me see. ', calls: [] });
    expect(parseToolCalls(`${toolCallPrefix('f')}{"a": 1`).calls.map((c) => c.function.name)).toEqual(['f']);
    expect(`${toolCallPrefix('f')}{}${TOOL_CALL_SUFFIX}`).toBe(call('f', '{}'));
  });
});

describe('streaming reads each character a bounded number of times', () => {
  /** The text pushed in `chunks`: the arguments that streamed, and the parser's count of characters read. */
  function stream(chunks: string[]): { args: string[]; content: string; examined: number } {
    const parser = new ToolCallParser();
    let content = '';
    for (const chunk of chunks) content += parser.push(chunk).content;
    content += parser.flush();
    return { args: parser.calls.map((c) => c.function.arguments), content, examined: parser.examined };
  }

  it('holds back what /\\s*\\}?\\s*$/ matches at the end of the arguments, however the text is split', () => {
    for (const body of ['{"a":1} }  ', '{"a":1}\n}\n', '{"a": "x }"}', '{"a":1}  }}', '{"a":1}', '[ ]  \n']) {
      const text = `${toolCallPrefix('f')}${body}${TOOL_CALL_END}`;
      for (const step of [1, 2, 3, text.length]) {
        const chunks = Array.from({ length: Math.ceil(text.length / step) }, (_, i) =>
          text.slice(i * step, (i + 1) * step),
        );
        expect(stream(chunks).args, JSON.stringify([body, step])).toEqual([body.replace(/\s*\}?\s*$/, '')]);
      }
    }
  });

  // 200 tokens over 1 MB of blanks: re-reading the block on every token read 100 MB and took 5 s here.
  const blanks = Array.from({ length: 200 }, () => ' '.repeat(5_000));
  const total = (chunks: string[]): number => chunks.reduce((n, c) => n + c.length, 0);

  it('a megabyte of whitespace streamed into the arguments', () => {
    const chunks = [`${toolCallPrefix('f')}{"a": 1`, ...blanks, '}\n', TOOL_CALL_END];
    const { args, examined } = stream(chunks);
    expect(args).toEqual(['{"a": 1']);
    expect(examined).toBeLessThan(4 * total(chunks));
  });

  it('a megabyte of whitespace where the header should be, and one token at a time', () => {
    const blank = stream([TOOL_CALL_BEGIN, ...blanks, '{"name": "f", "arguments": {}}', TOOL_CALL_END]);
    expect(blank.args).toEqual([]);
    expect(blank.examined).toBeLessThan(4 * 1_000_100);
    const text = `x${toolCallPrefix('f')}{"a": "${'b'.repeat(20_000)}"}\n${TOOL_CALL_END} y`;
    const single = stream([...text]);
    expect(single.args).toEqual([`{"a": "${'b'.repeat(20_000)}"`]);
    expect(single.content).toBe('x y');
    // Each one-character push may look back a marker's length, and the header is read from its start.
    expect(single.examined).toBeLessThan(text.length * (TOOL_CALL_END.length + 2) + 64 * 64);
  });
});

describe('grammar matcher', () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await loadEngine('cpu');
  });
  afterAll(async () => {
    await engine.runner.release();
  });

  const ids = (text: string): number[] => engine.tokenizer.encode(text);

  it('rolls back and forks', () => {
    const compiled = engine.constraints.compile({ spec: { type: 'regex', pattern: 'ab(c|d)+' }, param: 'x' });
    const m = compiled.matcher([2]);
    for (const t of ids('abc')) expect(m.accept(t)).toBe(true);
    const fork = m.fork();
    m.rollback(1);
    m.nextMask();
    expect(ids('d').every((t) => m.allows(t))).toBe(true);
    expect(m.accept(ids('x')[0])).toBe(false);
    // The fork kept its state: after "abc" it may end.
    fork.nextMask();
    expect(fork.allows(2)).toBe(true);
    expect(fork.accept(2)).toBe(true);
    expect(fork.terminated).toBe(true);
    expect(() => m.rollback(99)).toThrow(RangeError);
    m.dispose();
    fork.dispose();
  });
});

describe('forced tool calls are compact JSON, so a small model finishes them', () => {
  // The e2e suite's tools: bounded strings, so only whitespace could run on (and did: 2 of 6 finished).
  const tools = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: {
          type: 'object',
          properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['celsius', 'fahrenheit'] } },
          required: ['city', 'unit'],
          additionalProperties: false,
        },
      },
    },
    {
      type: 'function',
      function: {
        name: 'get_time',
        parameters: {
          type: 'object',
          properties: { zone: { type: 'string', maxLength: 6 } },
          required: ['zone'],
          additionalProperties: false,
        },
      },
    },
  ];
  const named = { type: 'function', function: { name: 'get_weather' } };
  let engine: Engine;
  beforeAll(async () => {
    // Our kernels: the same bits on every CPU, so seeded samples are the same everywhere.
    engine = await loadEngine('kernels');
  });
  afterAll(async () => {
    await engine.runner.release();
  });

  const forced = async (body: Record<string, unknown>, seed: number) => {
    const use = toolUse({ tools, ...body } as unknown as JsonObject);
    const constraint = withRequestWhitespace(use.constraint, body as JsonObject);
    const request = {
      messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }],
      tools: use.tools,
      constraint,
      temperature: 1,
      max_tokens: 120,
      seed,
    };
    return (await collect(engine, request)).done;
  };
  const outsideStrings = (json: string): string => json.replace(/"(?:[^"\\]|\\.)*"/g, '""');

  it('named or required, temperature 1, max_tokens 120: every call finishes with valid compact arguments', async () => {
    const bodies = [{ tool_choice: named }, { tool_choice: 'required', parallel_tool_calls: false }];
    for (const body of bodies) {
      for (const seed of [1, 2, 3]) {
        const done = await forced(body, seed);
        expect(done.finishReason).toBe('stop');
        const { calls } = parseToolCalls(done.text);
        expect(calls).toHaveLength(1);
        const args = JSON.parse(calls[0].function.arguments);
        expect(typeof args.city === 'string' || typeof args.zone === 'string').toBe(true);
        expect(outsideStrings(calls[0].function.arguments)).not.toMatch(/\s/);
      }
    }
  });

  it("disable_any_whitespace: false frees whitespace between the arguments' tokens again", () => {
    const prefix = `${toolCallPrefix('get_weather')}{`;
    const allowsSpace = (body: Record<string, unknown>): boolean => {
      const use = toolUse({ tools, tool_choice: named } as unknown as JsonObject);
      const constraint = withRequestWhitespace(use.constraint, body as JsonObject)!;
      const m = engine.constraints.compile(constraint).matcher([2]);
      for (const t of engine.tokenizer.encode(prefix)) expect(m.accept(t)).toBe(true);
      m.nextMask();
      const space = engine.tokenizer.encode(' ');
      const allowed = space.length === 1 && m.allows(space[0]);
      m.dispose();
      return allowed;
    };
    expect(allowsSpace({})).toBe(false);
    expect(allowsSpace({ structured_outputs: { disable_any_whitespace: false } })).toBe(true);
    expect(allowsSpace({ structured_outputs: { disable_any_whitespace: true } })).toBe(false);
  });
});

// Tool calls in the model's text (Hermes format), parsed whole and as a stream split at every possible
// point; and the grammar matcher's rollback and fork, which beams and speculation lean on.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { parseToolCalls, ToolCallParser, type ToolCallDelta } from '../src/worker/tool-calls.js';
import { toolCallText, TOOL_CALL_SUFFIX, toolCallPrefix } from '../src/tokenizer/tool-format.js';
import { loadEngine } from './helpers/engines.js';

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
    expect(`${toolCallPrefix('f')}{}${TOOL_CALL_SUFFIX}`).toBe(call('f', '{}'));
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

// Reasoning and tool calls on the wire, from the object's events as the worker receives them: chat
// completions' message.reasoning_content and delta.reasoning_content, and the Responses API's stream (its
// reasoning item, its message, its calls) ending with the response the object built. The chunks' texts
// add up to the whole, however the text is split into tokens.
import { describe, expect, it } from 'vitest';
import type { WireEvent } from '../src/objects/generation-run.js';
import { outputItems } from '../src/responses/output-items.js';
import type { ReasoningFormat } from '../src/responses/reasoning.js';
import { responseView, type ResponseSpec } from '../src/responses/response-view.js';
import { chatChunks, chatCompletion, responseMeta } from '../src/worker/openai.js';
import { responseEvents } from '../src/worker/responses-stream.js';

const format: ReasoningFormat = { begin: '<think>', end: '</think>', startsInside: false };
const metrics = { promptTokens: 5, cachedTokens: 0, completionTokens: 0 } as never;
const reasoned =
  '<think>\nCheck the weather.\n</think>\n\nLet me look. <tool_call>\n{"name": "w", "arguments": {"c": 1}}\n</tool_call>';

/** The text as `step`-character tokens, then its done event. */
function events(text: string, step: number, extra: Partial<Extract<WireEvent, { type: 'done' }>> = {}): WireEvent[] {
  const out: WireEvent[] = [];
  for (let i = 0; i < text.length; i += step)
    out.push({ type: 'token', index: 0, tokenId: 0, text: text.slice(i, i + step) });
  out.push({ type: 'done', index: 0, finishReason: 'stop', text, completionIds: [], metrics, ...extra });
  return out;
}

async function* iterate<T>(items: T[]): AsyncGenerator<T> {
  for (const item of items) yield item;
}

describe('chat completions with reasoning', () => {
  it('message.reasoning_content apart from content and tool calls', () => {
    const done = events(reasoned, reasoned.length).at(-1) as Extract<WireEvent, { type: 'done' }>;
    const completion = chatCompletion(responseMeta('chatcmpl', 'm'), [[]], [done], 1, false, true, format);
    const message = completion.choices[0].message as Record<string, unknown>;
    expect(message.reasoning_content).toBe('\nCheck the weather.\n');
    expect(message.content).toBe('Let me look.');
    expect((message.tool_calls as { function: { name: string } }[])[0].function.name).toBe('w');
    expect(completion.choices[0].finish_reason).toBe('tool_calls');
    // A model without tags: the text is the content, untouched, and there is no reasoning_content.
    const plain = chatCompletion(responseMeta('chatcmpl', 'm'), [[]], [done], 1, false, false);
    expect(plain.choices[0].message.content).toBe(reasoned);
    expect('reasoning_content' in plain.choices[0].message).toBe(false);
  });

  it('streams delta.reasoning_content, then content, then tool call deltas, however the text is split', async () => {
    for (const step of [1, 2, 5, 64]) {
      const chunks = [];
      for await (const chunk of chatChunks(
        iterate(events(reasoned, step)),
        responseMeta('chatcmpl', 'm'),
        1,
        1,
        false,
        false,
        true,
        format,
      ))
        chunks.push(chunk);
      const deltas = chunks.flatMap((c) => c.choices as { delta: Record<string, unknown> }[]).map((c) => c.delta);
      expect(deltas.map((d) => d.reasoning_content ?? '').join(''), `step ${step}`).toBe('\nCheck the weather.\n');
      expect(
        deltas
          .map((d) => d.content ?? '')
          .join('')
          .trim(),
      ).toBe('Let me look.');
      const args = deltas.flatMap((d) => (d.tool_calls as { function: { arguments: string } }[] | undefined) ?? []);
      expect(args.map((a) => a.function.arguments).join('')).toBe('{"c": 1}');
      expect(deltas.some((d) => String(d.content ?? '').includes('<'))).toBe(false);
    }
  });
});

describe('the Responses API stream', () => {
  const spec = {
    id: 'resp_0.abcdef',
    created_at: 1,
    model: 'm',
    instructions: null,
    input: [],
    messages: [],
    tools: null,
    parse_tools: true,
    constraint: undefined,
    temperature: null,
    top_p: null,
    max_output_tokens: null,
    store: true,
    previous_response_id: null,
    conversation: null,
    metadata: {},
    chat_template_kwargs: undefined,
    echo: { tools: [], tool_choice: 'auto', parallel_tool_calls: true, text: null, reasoning: null, user: null },
  } satisfies ResponseSpec;

  it('opens a reasoning item, a message and a call in order, and ends with the finished response', async () => {
    const output = outputItems(spec.id, reasoned, { reasoning: format, parseTools: true, incomplete: false });
    const final = responseView(spec, {
      output,
      finishReason: 'stop',
      promptTokens: 5,
      cachedTokens: 0,
      completionTokens: 9,
      reasoningTokens: 4,
    });
    for (const step of [1, 3, 64]) {
      const stream: Record<string, unknown>[] = [];
      for await (const e of responseEvents(
        iterate(events(reasoned, step, { response: final })),
        responseView(spec),
        format,
        true,
      ))
        stream.push(e);
      const types = stream.map((e) => e.type);
      expect(types.slice(0, 4)).toEqual([
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
      ]);
      const added = stream
        .filter((e) => e.type === 'response.output_item.added')
        .map((e) => (e.item as { id: string }).id);
      expect(added, `step ${step}`).toEqual(output.map((item) => item.id));
      const text = (type: string) =>
        stream
          .filter((e) => e.type === type)
          .map((e) => e.delta)
          .join('');
      expect(text('response.reasoning_text.delta')).toBe('\nCheck the weather.\n');
      expect(text('response.output_text.delta').trim()).toBe('Let me look.');
      expect(text('response.function_call_arguments.delta')).toBe('{"c": 1}');
      const doneItems = stream.filter((e) => e.type === 'response.output_item.done').map((e) => e.item);
      expect(doneItems).toEqual(output);
      expect(stream.at(-1)).toMatchObject({ type: 'response.completed', response: final });
      expect(stream.map((e) => e.sequence_number)).toEqual(stream.map((_, i) => i));
    }
  });
});

// A conversation's items read back as chat history give the same messages a request's input items give, and a
// response's output items the same assistant message its stored chain keeps (reasoning left out in both).
import { describe, expect, it } from 'vitest';
import { chatHistory } from '../src/responses/conversation-items.js';
import { assistantMessage, outputItems } from '../src/responses/output-items.js';
import { inputItems } from '../src/worker/responses-request.js';

describe('chatHistory', () => {
  it('reads input items as the request reader does', () => {
    const raw = [
      { role: 'developer', content: 'Be brief.' },
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'Weather' },
          { type: 'input_text', text: ' in Paris?' },
        ],
      },
      { type: 'message', role: 'assistant', content: 'Let me look.' },
      { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call', call_id: 'c2', name: 'get_time', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c1', output: '21 C' },
      { type: 'reasoning', id: 'rs_1', summary: [] },
      { role: 'user', content: 'Thanks.' },
    ];
    const { input, messages } = inputItems(raw);
    expect(chatHistory(input)).toEqual(messages);
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'user']);
    expect(messages[2].tool_calls?.map((c) => c.id)).toEqual(['c1', 'c2']);
  });

  it("reads a response's output items as the assistant message a chain stores, reasoning left out", () => {
    const format = { begin: '<think>', end: '</think>', startsInside: false };
    const output = outputItems(
      'resp_0.abc',
      '<think>hmm</think>Calling.<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>',
      { reasoning: format, parseTools: true, incomplete: false },
    );
    expect(output.map((item) => item.type)).toEqual(['reasoning', 'message', 'function_call']);
    expect(chatHistory(output)).toEqual([assistantMessage(output)]);
    const callsOnly = outputItems('resp_0.def', '<tool_call>{"name": "f", "arguments": {}}</tool_call>', {
      reasoning: undefined,
      parseTools: true,
      incomplete: false,
    });
    expect(chatHistory(callsOnly)).toEqual([assistantMessage(callsOnly)]);
  });
});

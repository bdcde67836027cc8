// POST /v1/responses's body read into what the object runs: input items to chat messages, Responses-shaped
// tools to the chat shape tools.ts forces and parses, text.format to a grammar; and every malformed field a 400
// that names it as this API spells it.
import { describe, expect, it } from 'vitest';
import { ApiError } from '../src/worker/errors.js';
import { responseRequest } from '../src/worker/responses-request.js';

const read = (body: Record<string, unknown>) => responseRequest({ input: 'hi', ...body } as never, 'tiny');

function refusal(body: Record<string, unknown>): { status: number; param: string | null; code: string | null } {
  try {
    read(body);
  } catch (err) {
    if (err instanceof ApiError) return { status: err.status, param: err.param, code: err.code };
    throw err;
  }
  throw new Error('accepted');
}

describe('responses request', () => {
  it('reads items into messages: developer is system, calls join the assistant turn, outputs are tool turns', () => {
    const request = read({
      input: [
        { role: 'developer', content: 'Be brief.' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather?' }] },
        { type: 'function_call', call_id: 'c1', name: 'w', arguments: '{}' },
        { type: 'function_call', call_id: 'c2', name: 'w', arguments: '{"x":1}' },
        { type: 'function_call_output', call_id: 'c1', output: 'sunny' },
        { type: 'reasoning', id: 'rs_1', summary: [] },
      ],
    });
    expect(request.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'w', arguments: '{}' } },
          { id: 'c2', type: 'function', function: { name: 'w', arguments: '{"x":1}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
    ]);
    expect(request.input.map((i) => i.type)).toEqual([
      'message',
      'message',
      'function_call',
      'function_call',
      'function_call_output',
    ]);
    expect(request.store).toBe(true);
  });

  it('function tools in the Responses shape: forced by tool_choice, parsed unless "none"', () => {
    const tools = [{ type: 'function', name: 'w', parameters: { type: 'object', properties: {} } }];
    const forced = read({ tools, tool_choice: { type: 'function', name: 'w' } });
    expect(forced.tools).toEqual([{ type: 'function', function: { name: 'w', parameters: tools[0].parameters } }]);
    expect(forced.constraint?.spec.type).toBe('tool_calls');
    expect(forced.parse_tools).toBe(true);
    const none = read({ tools, tool_choice: 'none' });
    expect(none.tools).toBeNull();
    expect(none.parse_tools).toBe(false);
    expect(
      read({ text: { format: { type: 'json_schema', name: 'p', schema: { type: 'object' } } } }).constraint,
    ).toMatchObject({
      spec: { type: 'json_schema', name: 'p' },
      param: 'text.format.schema',
    });
  });

  it('refuses what it cannot do, naming the field', () => {
    expect(refusal({ nonsense: 1 })).toMatchObject({ status: 400, param: 'nonsense', code: 'unknown_parameter' });
    expect(refusal({ previous_response_id: 'resp_0.x', conversation: 'conv_1' })).toMatchObject({
      param: 'conversation',
    });
    expect(refusal({ input: [{ type: 'item_reference', id: 'x' }] })).toMatchObject({ param: 'input[0].type' });
    expect(refusal({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] })).toMatchObject({
      param: 'input[0].content[0].type',
    });
    expect(refusal({ input: '' })).toMatchObject({ param: 'input' });
    expect(refusal({ tools: [{ type: 'web_search' }] })).toMatchObject({ param: 'tools[0].type' });
    expect(refusal({ tools: [{ type: 'function', name: 'bad name' }] })).toMatchObject({ param: 'tools[0].name' });
    expect(refusal({ tool_choice: { type: 'function', name: 'w' } })).toMatchObject({ param: 'tool_choice' });
    expect(refusal({ text: { format: { type: 'json_schema', schema: {} } } })).toMatchObject({
      param: 'text.format.name',
    });
    expect(refusal({ max_output_tokens: 0 })).toMatchObject({ param: 'max_output_tokens' });
    expect(refusal({ metadata: { k: 5 } })).toMatchObject({ param: 'metadata.k' });
    expect(refusal({ truncation: 'auto' })).toMatchObject({ param: 'truncation', code: 'unsupported_parameter' });
    expect(refusal({ store: 'yes' })).toMatchObject({ param: 'store' });
  });
});

/**
 * The text format of tool calls: Hermes / Qwen 2.5 style, one call per block,
 *
 *   <tool_call>
 *   {"name": "get_weather", "arguments": {"city": "Paris"}}
 *   </tool_call>
 *
 * Models whose chat template speaks it (it mentions `<tool_call>`) are handed `tools` and tool messages
 * as Hugging Face templates expect. For any other template the same format is written into the prompt
 * by `genericToolMessages`: a system preamble listing the functions, tool calls in assistant turns as
 * the blocks above, and tool results as user turns in <tool_response> tags. Either way the model answers
 * in this one format, which is what the service parses (and what forced calls are constrained to).
 */
import type { TemplateMessage } from './chat-messages.js';

export const TOOL_CALL_BEGIN = '<tool_call>';
export const TOOL_CALL_END = '</tool_call>';

/** The text that opens a call of `name`, up to where its arguments' JSON begins (what forced calls are constrained from). */
export function toolCallPrefix(name: string): string {
  return `${TOOL_CALL_BEGIN}\n{"name": ${JSON.stringify(name)}, "arguments": `;
}
export const TOOL_CALL_SUFFIX = `}\n${TOOL_CALL_END}`;

/** One call as the model writes it (arguments: JSON text). */
export function toolCallText(name: string, args: string): string {
  return `${toolCallPrefix(name)}${args.trim() || '{}'}${TOOL_CALL_SUFFIX}`;
}

/** Whether a chat template renders `tools` and tool messages in this format itself. */
export function templateSpeaksTools(template: string): boolean {
  return template.includes('tools') && template.includes(TOOL_CALL_BEGIN);
}

export function toolsPreamble(tools: readonly unknown[]): string {
  return (
    '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
    'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' +
    tools.map((t) => `\n${JSON.stringify(t)}`).join('') +
    '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  );
}

/** Messages (and tools) rewritten into plain system / user / assistant turns in the format above. */
export function genericToolMessages(
  messages: TemplateMessage[],
  tools: readonly unknown[] | undefined,
): TemplateMessage[] {
  const out: TemplateMessage[] = messages.map((m) => {
    if (m.role === 'tool') return { role: 'user', content: `<tool_response>\n${m.content}\n</tool_response>` };
    if (m.role === 'assistant' && m.tool_calls?.length) {
      const calls = m.tool_calls.map((c) => toolCallText(c.function.name, c.function.arguments));
      return { role: 'assistant', content: [m.content, ...calls].filter((s) => s.length > 0).join('\n') };
    }
    return { role: m.role, content: m.content };
  });
  if (tools && tools.length > 0) {
    const preamble = toolsPreamble(tools);
    if (out[0]?.role === 'system') out[0] = { role: 'system', content: `${out[0].content}\n\n${preamble}` };
    else out.unshift({ role: 'system', content: preamble });
  }
  return out;
}

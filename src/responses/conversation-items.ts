/**
 * A conversation's items (OpenAI's Conversations API) read back as the chat history a template renders:
 * messages as they are (developer as system), function calls joined to the assistant message before them
 * (as assistantMessage joins a response's own), their outputs as tool messages, reasoning left out (as
 * templates leave earlier reasoning out). The same reading responses-request.ts gives a request's input.
 */
import type { ChatMessage } from '../engine/request.js';
import type { InputItem, OutputItem } from './output-items.js';

export type ConversationItem = InputItem | OutputItem;

export function chatHistory(items: readonly ConversationItem[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  for (const item of items) {
    if (item.type === 'message') {
      const content = item.content.map((part) => part.text).join('');
      messages.push({ role: item.role === 'developer' ? 'system' : item.role, content });
    } else if (item.type === 'function_call') {
      const call = {
        id: item.call_id,
        type: 'function' as const,
        function: { name: item.name, arguments: item.arguments },
      };
      const last = messages.at(-1);
      if (last?.role === 'assistant')
        messages[messages.length - 1] = { ...last, tool_calls: [...(last.tool_calls ?? []), call] };
      else messages.push({ role: 'assistant', content: '', tool_calls: [call] });
    } else if (item.type === 'function_call_output')
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: item.output });
  }
  return messages;
}

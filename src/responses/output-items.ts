/**
 * The output items of a response (OpenAI's Responses API) from a completion's text: a reasoning item
 * (when the model reasoned), a message with the answer, and a function call per `<tool_call>` block.
 * Item ids are derived from the response's id, so the object that stores a response and the worker that
 * streams it name every item alike without passing them around.
 */
import type { ChatMessage } from '../engine/request.js';
import { parseToolCalls } from '../worker/tool-calls.js';
import { splitReasoning, type ReasoningFormat } from './reasoning.js';

export interface OutputText {
  type: 'output_text';
  text: string;
  annotations: [];
  logprobs: [];
}

export interface MessageItem {
  type: 'message';
  id: string;
  status: 'completed' | 'incomplete' | 'in_progress';
  role: 'assistant' | 'user' | 'system' | 'developer';
  content: (OutputText | { type: 'input_text'; text: string })[];
}

export interface FunctionCallItem {
  type: 'function_call';
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: 'completed' | 'incomplete' | 'in_progress';
}

export interface FunctionCallOutputItem {
  type: 'function_call_output';
  id: string;
  call_id: string;
  output: string;
  status: 'completed';
}

export interface ReasoningItem {
  type: 'reasoning';
  id: string;
  summary: [];
  content: { type: 'reasoning_text'; text: string }[];
  status: 'completed' | 'incomplete' | 'in_progress';
}

export type OutputItem = ReasoningItem | MessageItem | FunctionCallItem;
export type InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem;

/** `resp_0.abc…` → `0abc…`: what item ids are made of (letters and digits only, as OpenAI's are). */
const stem = (responseId: string): string => responseId.replace(/^resp_/, '').replace(/[^0-9a-zA-Z]/g, '');

export const itemIds = {
  reasoning: (responseId: string): string => `rs_${stem(responseId)}`,
  message: (responseId: string): string => `msg_${stem(responseId)}`,
  call: (responseId: string, index: number): string => `fc_${stem(responseId)}_${index}`,
  callId: (responseId: string, index: number): string => `call_${stem(responseId)}_${index}`,
  input: (responseId: string, index: number): string => `in_${stem(responseId)}_${index}`,
};

export const outputText = (text: string): OutputText => ({ type: 'output_text', text, annotations: [], logprobs: [] });

/** Output items, in the order the stream opens them: reasoning, the message (if it has text), calls. */
export function outputItems(
  responseId: string,
  text: string,
  options: { reasoning: ReasoningFormat | undefined; parseTools: boolean; incomplete: boolean },
): OutputItem[] {
  const status = options.incomplete ? 'incomplete' : 'completed';
  const { reasoning, content } = splitReasoning(options.reasoning, text);
  const { content: answer, calls } = options.parseTools
    ? parseToolCalls(content)
    : { content, calls: [] as ReturnType<typeof parseToolCalls>['calls'] };
  const items: OutputItem[] = [];
  if (reasoning !== undefined)
    items.push({
      type: 'reasoning',
      id: itemIds.reasoning(responseId),
      summary: [],
      content: [{ type: 'reasoning_text', text: reasoning }],
      status,
    });
  if (answer.trim() !== '' || calls.length === 0)
    items.push({
      type: 'message',
      id: itemIds.message(responseId),
      status,
      role: 'assistant',
      content: [outputText(answer)],
    });
  for (const [i, call] of calls.entries())
    items.push({
      type: 'function_call',
      id: itemIds.call(responseId, i),
      call_id: itemIds.callId(responseId, i),
      name: call.function.name,
      arguments: call.function.arguments,
      status,
    });
  return items;
}

/** The assistant message the output items make in a chat history (reasoning left out, as templates drop it). */
export function assistantMessage(items: readonly OutputItem[]): ChatMessage {
  let content = '';
  const calls: NonNullable<ChatMessage['tool_calls']>[number][] = [];
  for (const item of items) {
    if (item.type === 'message') content += item.content.map((c) => c.text).join('');
    if (item.type === 'function_call')
      calls.push({ id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } });
  }
  return calls.length > 0 ? { role: 'assistant', content, tool_calls: calls } : { role: 'assistant', content };
}

/** The text a response's output items add up to (the SDKs' `output_text`). */
export function outputTextOf(items: readonly OutputItem[]): string {
  return items.flatMap((item) => (item.type === 'message' ? item.content.map((c) => c.text) : [])).join('');
}

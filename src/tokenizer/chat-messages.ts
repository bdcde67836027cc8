/**
 * The one check of OpenAI chat messages, used at the edge (src/worker/request-params.ts) and again by the chat
 * template, so both agree on what a message means. Semantics follow OpenAI's schema and vLLM's reading of
 * it: content is a string or an array of text parts, and text parts are joined with '\n' (as vLLM does);
 * an assistant message may have null or no content (OpenAI allows it), the others must have content;
 * `developer` is `system` under its newer name. Tool use: an assistant message may carry `tool_calls`
 * (then its content may be empty), and a `tool` message carries a function's result for `tool_call_id`.
 * Errors name the field (`messages[2].content[0]`).
 */
import { InvalidRequestError } from '../invalid-request.js';

export interface TemplateToolCall {
  id: string;
  type: 'function';
  /** `arguments` is JSON text, as OpenAI sends it. */
  function: { name: string; arguments: string };
}

export interface TemplateMessage {
  role: string;
  content: string;
  tool_calls?: TemplateToolCall[];
  tool_call_id?: string;
}

const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'];

const kind = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

/** A content value as text: a string as is, text parts joined with '\n'. `param` names it in errors. */
export function contentText(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content))
    throw new InvalidRequestError(
      param,
      `${param} must be a string or an array of text parts, got ${kind(content)}`,
      'invalid_type',
    );
  return content
    .map((part: unknown, j) => {
      const p = part as { type?: unknown; text?: unknown } | null;
      if (kind(part) !== 'object' || p!.type !== 'text' || typeof p!.text !== 'string') {
        throw new InvalidRequestError(
          `${param}[${j}]`,
          'only text content parts ({"type":"text","text":...}) are supported',
          'invalid_type',
        );
      }
      return p!.text as string;
    })
    .join('\n');
}

/** Checks OpenAI-style messages and reduces them to `{ role, content: string }`. */
export function validateMessages(messages: unknown): TemplateMessage[] {
  if (!Array.isArray(messages)) {
    throw new InvalidRequestError(
      'messages',
      messages === undefined ? 'messages is required' : `messages must be an array, got ${kind(messages)}`,
      'invalid_type',
    );
  }
  if (messages.length === 0) throw new InvalidRequestError('messages', 'messages must not be empty');
  return messages.map((message: unknown, i) => {
    const at = `messages[${i}]`;
    if (kind(message) !== 'object')
      throw new InvalidRequestError(at, `${at} must be an object with role and content`, 'invalid_type');
    const { role, content } = message as { role?: unknown; content?: unknown };
    if (typeof role !== 'string')
      throw new InvalidRequestError(`${at}.role`, `${at}.role must be a string`, 'invalid_type');
    if (!ROLES.includes(role))
      throw new InvalidRequestError(
        `${at}.role`,
        `${at}.role '${role}' is not one of system, developer, user, assistant, tool`,
      );
    const mapped = role === 'developer' ? 'system' : role;
    const out: TemplateMessage =
      (content === null || content === undefined) && mapped === 'assistant'
        ? { role: mapped, content: '' }
        : { role: mapped, content: requiredContent(content, `${at}.content`) };
    const { tool_calls: calls, tool_call_id: callId } = message as { tool_calls?: unknown; tool_call_id?: unknown };
    if (mapped === 'tool') {
      if (typeof callId !== 'string' || callId.length === 0)
        throw new InvalidRequestError(
          `${at}.tool_call_id`,
          `${at}.tool_call_id is required for a tool message`,
          'invalid_type',
        );
      out.tool_call_id = callId;
    }
    if (calls !== undefined && calls !== null) {
      if (mapped !== 'assistant')
        throw new InvalidRequestError(`${at}.tool_calls`, 'only assistant messages carry tool_calls');
      out.tool_calls = toolCalls(calls, `${at}.tool_calls`);
    }
    return out;
  });
}

function requiredContent(content: unknown, param: string): string {
  if (content === undefined) throw new InvalidRequestError(param, `${param} is required`, 'invalid_type');
  return contentText(content, param);
}

function toolCalls(calls: unknown, param: string): TemplateToolCall[] {
  if (!Array.isArray(calls)) throw new InvalidRequestError(param, `${param} must be an array`, 'invalid_type');
  return calls.map((call: unknown, i) => {
    const at = `${param}[${i}]`;
    const c = call as { id?: unknown; type?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
    if (kind(call) !== 'object' || typeof c!.id !== 'string')
      throw new InvalidRequestError(`${at}.id`, `${at}.id must be a string`, 'invalid_type');
    if (c!.type !== undefined && c!.type !== 'function')
      throw new InvalidRequestError(`${at}.type`, `${at}.type must be "function"`);
    const fn = c!.function;
    if (kind(fn) !== 'object' || typeof fn!.name !== 'string')
      throw new InvalidRequestError(`${at}.function.name`, `${at}.function.name must be a string`, 'invalid_type');
    const args = fn!.arguments;
    if (typeof args !== 'string')
      throw new InvalidRequestError(
        `${at}.function.arguments`,
        `${at}.function.arguments must be a JSON string`,
        'invalid_type',
      );
    return { id: c!.id, type: 'function', function: { name: fn!.name, arguments: args } };
  });
}

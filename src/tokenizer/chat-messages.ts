/**
 * The one check of OpenAI chat messages, used at the edge (src/worker/params.ts) and again by the chat
 * template, so both agree on what a message means. Semantics follow OpenAI's schema and vLLM's reading of
 * it: content is a string or an array of text parts, and text parts are joined with '\n' (as vLLM does);
 * an assistant message may have null or no content (OpenAI allows it), the others must have content;
 * `developer` is `system` under its newer name. Errors name the field (`messages[2].content[0]`).
 */
import { InvalidRequestError } from '../engine/errors.js';

export interface TemplateMessage {
  role: string;
  content: string;
}

const ROLES = ['system', 'developer', 'user', 'assistant'];

const kind = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

/** A content value as text: a string as is, text parts joined with '\n'. `param` names it in errors. */
export function contentText(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw new InvalidRequestError(param, `${param} must be a string or an array of text parts, got ${kind(content)}`, 'invalid_type');
  return content
    .map((part: unknown, j) => {
      const p = part as { type?: unknown; text?: unknown } | null;
      if (kind(part) !== 'object' || p!.type !== 'text' || typeof p!.text !== 'string') {
        throw new InvalidRequestError(`${param}[${j}]`, 'only text content parts ({"type":"text","text":...}) are supported', 'invalid_type');
      }
      return p!.text as string;
    })
    .join('\n');
}

/** Checks OpenAI-style messages and reduces them to `{ role, content: string }`. */
export function validateMessages(messages: unknown): TemplateMessage[] {
  if (!Array.isArray(messages)) {
    throw new InvalidRequestError('messages', messages === undefined ? 'messages is required' : `messages must be an array, got ${kind(messages)}`, 'invalid_type');
  }
  if (messages.length === 0) throw new InvalidRequestError('messages', 'messages must not be empty');
  return messages.map((message: unknown, i) => {
    const at = `messages[${i}]`;
    if (kind(message) !== 'object') throw new InvalidRequestError(at, `${at} must be an object with role and content`, 'invalid_type');
    const { role, content } = message as { role?: unknown; content?: unknown };
    if (typeof role !== 'string') throw new InvalidRequestError(`${at}.role`, `${at}.role must be a string`, 'invalid_type');
    if (!ROLES.includes(role)) throw new InvalidRequestError(`${at}.role`, `${at}.role '${role}' is not one of system, developer, user, assistant`);
    const mapped = role === 'developer' ? 'system' : role;
    if ((content === null || content === undefined) && mapped === 'assistant') return { role: mapped, content: '' };
    if (content === undefined) throw new InvalidRequestError(`${at}.content`, `${at}.content is required`, 'invalid_type');
    return { role: mapped, content: contentText(content, `${at}.content`) };
  });
}

/**
 * Renders chat messages into a prompt string with the model's Jinja chat template (tokenizer_config.json
 * `chat_template`), via @huggingface/jinja (an interpreter, no eval: fine in workerd). The result is
 * meant for TextTokenizer.encode, which turns the ChatML marker strings back into their special ids.
 */
import { Template } from '@huggingface/jinja';
import { InvalidRequestError } from '../engine/errors.js';

/** Roles the ChatML template can express. OpenAI's `developer` is its newer name for `system`. */
const ROLES = new Set(['system', 'user', 'assistant']);

export interface TemplateMessage {
  role: string;
  content: string;
}

export interface RenderChatOptions {
  /** Append the assistant header so the model answers next (default true). */
  addGenerationPrompt?: boolean;
}

// Parsing a template is far dearer than rendering it; models keep one template for their lifetime.
const compiled = new Map<string, Template>();

/**
 * Prompt text for `messages` (OpenAI chat shape: `{ role, content }`, content a string or text parts).
 * `config` is tokenizer_config.json: its bos/eos/pad/unk tokens are passed to the template, as HF does.
 * Throws InvalidRequestError (param `messages`) for malformed messages.
 */
export function renderChat(
  template: string,
  messages: unknown,
  config: Record<string, unknown> = {},
  { addGenerationPrompt = true }: RenderChatOptions = {},
): string {
  const normalized = validateMessages(messages);
  let compiledTemplate = compiled.get(template);
  if (!compiledTemplate) {
    compiledTemplate = new Template(template);
    compiled.set(template, compiledTemplate);
  }
  return compiledTemplate.render({
    messages: normalized,
    add_generation_prompt: addGenerationPrompt,
    bos_token: tokenText(config.bos_token),
    eos_token: tokenText(config.eos_token),
    pad_token: tokenText(config.pad_token),
    unk_token: tokenText(config.unk_token),
  });
}

/** Checks OpenAI-style messages and reduces them to `{ role, content: string }`. */
export function validateMessages(messages: unknown): TemplateMessage[] {
  if (!Array.isArray(messages)) throw invalid('messages must be an array of { role, content } objects');
  if (messages.length === 0) throw invalid('messages must contain at least one message');
  return messages.map((message: unknown, i) => {
    if (typeof message !== 'object' || message === null || Array.isArray(message)) {
      throw invalid(`messages[${i}] must be an object with role and content`);
    }
    const { role, content } = message as { role?: unknown; content?: unknown };
    if (typeof role !== 'string') throw invalid(`messages[${i}].role must be a string`);
    const mapped = role === 'developer' ? 'system' : role;
    if (!ROLES.has(mapped)) {
      throw invalid(`messages[${i}].role '${role}' is not supported (use system, developer, user or assistant)`);
    }
    return { role: mapped, content: contentText(content, i) };
  });
}

/** A string, or OpenAI content parts of which only `{ type: 'text', text }` can be rendered (joined by newlines). */
function contentText(content: unknown, i: number): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw invalid(`messages[${i}].content must be a string or an array of text parts`);
  return content
    .map((part: unknown, j) => {
      const p = part as { type?: unknown; text?: unknown } | null;
      if (typeof p !== 'object' || p === null || p.type !== 'text' || typeof p.text !== 'string') {
        throw invalid(`messages[${i}].content[${j}] must be { type: 'text', text: string } (only text is supported)`);
      }
      return p.text;
    })
    .join('\n');
}

function tokenText(token: unknown): string | undefined {
  if (typeof token === 'string') return token;
  if (typeof token === 'object' && token !== null && typeof (token as { content?: unknown }).content === 'string') {
    return (token as { content: string }).content;
  }
  return undefined;
}

function invalid(message: string): InvalidRequestError {
  return new InvalidRequestError('messages', message);
}

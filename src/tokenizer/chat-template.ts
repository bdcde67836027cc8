/**
 * Renders chat messages into a prompt string with the model's Jinja chat template (tokenizer_config.json
 * `chat_template`), via @huggingface/jinja (an interpreter, no eval: fine in workerd). The result is
 * meant for TextTokenizer.encode, which turns the ChatML marker strings back into their special ids.
 */
import { Template } from '@huggingface/jinja';
import { validateMessages } from './chat-messages.js';
import { genericToolMessages, templateSpeaksTools } from './tool-format.js';

export { validateMessages, type TemplateMessage } from './chat-messages.js';

export interface RenderChatOptions {
  /** Append the assistant header so the model answers next (default true). */
  addGenerationPrompt?: boolean;
  /** OpenAI `tools` (function definitions); rendered by the template if it speaks tools, else as tool-format.ts writes them. */
  tools?: readonly unknown[];
  /** Extra template variables (chat_template_kwargs: `enable_thinking`), beneath the ones set here. */
  variables?: Readonly<Record<string, unknown>>;
}

// Parsing a template is far dearer than rendering it; models keep one template for their lifetime.
const compiled = new Map<string, Template>();

/**
 * Prompt text for `messages` (OpenAI chat shape: `{ role, content }`, content a string or text parts).
 * `config` is tokenizer_config.json: its bos/eos/pad/unk tokens are passed to the template, as HF does.
 * Throws InvalidRequestError (naming the field) for malformed messages: see chat-messages.ts.
 */
export function renderChat(
  template: string,
  messages: unknown,
  config: Record<string, unknown> = {},
  { addGenerationPrompt = true, tools, variables }: RenderChatOptions = {},
): string {
  let normalized = validateMessages(messages);
  const usesTools = (tools?.length ?? 0) > 0 || normalized.some((m) => m.role === 'tool' || m.tool_calls);
  const native = usesTools && templateSpeaksTools(template);
  if (usesTools && !native) normalized = genericToolMessages(normalized, tools);
  let compiledTemplate = compiled.get(template);
  if (!compiledTemplate) {
    compiledTemplate = new Template(template);
    compiled.set(template, compiledTemplate);
  }
  return compiledTemplate.render({
    ...variables,
    messages: normalized,
    ...(native && tools?.length ? { tools } : {}),
    add_generation_prompt: addGenerationPrompt,
    bos_token: tokenText(config.bos_token),
    eos_token: tokenText(config.eos_token),
    pad_token: tokenText(config.pad_token),
    unk_token: tokenText(config.unk_token),
  });
}

function tokenText(token: unknown): string | undefined {
  if (typeof token === 'string') return token;
  if (typeof token === 'object' && token !== null && typeof (token as { content?: unknown }).content === 'string') {
    return (token as { content: string }).content;
  }
  return undefined;
}

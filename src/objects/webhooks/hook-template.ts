/**
 * A hook's prompt template: Jinja, rendered by @huggingface/jinja (the interpreter that renders chat
 * templates; no eval, so fine in workerd) over the inbound event. The event is available as `event`,
 * and an object event's top-level keys also as variables (`{{ title }}` for `{"title": ...}`).
 */
import { Template } from '@huggingface/jinja';

export const MAX_TEMPLATE_CHARS = 32 * 1024;
/** Rendered prompts longer than this are refused before tokenisation. */
export const MAX_RENDERED_CHARS = 256 * 1024;

const compiled = new Map<string, Template>();

/** Parses the template once (parsing is far dearer than rendering); throws with the parser's message. */
function compile(source: string): Template {
  let template = compiled.get(source);
  if (!template) {
    template = new Template(source);
    if (compiled.size > 256) compiled.clear();
    compiled.set(source, template);
  }
  return template;
}

/** null when the template is usable, otherwise why not. */
export function checkTemplate(source: unknown): string | null {
  if (typeof source !== 'string' || source.trim() === '') return 'template must be a non-empty string';
  if (source.length > MAX_TEMPLATE_CHARS) return `template is longer than ${MAX_TEMPLATE_CHARS} characters`;
  try {
    compile(source);
    return null;
  } catch (err) {
    return `template does not parse: ${err instanceof Error ? err.message : String(err)}`;
  }
}

/** Renders the template over an event; throws Error with a readable message when rendering fails. */
export function renderHookTemplate(source: string, event: unknown, hook: string): string {
  const spread =
    typeof event === 'object' && event !== null && !Array.isArray(event) ? (event as Record<string, unknown>) : {};
  let text: string;
  try {
    text = compile(source).render({ ...spread, event, hook });
  } catch (err) {
    throw new Error(`the hook's template failed on this event: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (text.trim() === '') throw new Error("the hook's template rendered an empty prompt for this event");
  if (text.length > MAX_RENDERED_CHARS)
    throw new Error(`the rendered prompt is longer than ${MAX_RENDERED_CHARS} characters`);
  return text;
}
